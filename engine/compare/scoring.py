"""How a cell scores a pretrained checkpoint: kNN and the linear probe on frozen features, and the small-data
fine-tune (engine/compare/cells.py runs them; the studies fine-tune through `finetune` too)."""

from pathlib import Path

import torch

from pretexts.backbones.normalisation import normalisation
from pretexts.engine.compare.inputs import probe_inputs
from pretexts.engine.evaluation.finetune import Finetuner
from pretexts.engine.evaluation.finetune_config import FinetuneConfig
from pretexts.engine.evaluation.probe import extract_features
from pretexts.engine.evaluation.probe_config import ProbeConfig
from pretexts.engine.evaluation.weights import load_backbone
from pretexts.engine.training.precision import amp_dtype, precision_name
from pretexts.engine.training.preflight import resolve_device
from pretexts.registry import PROBES


class Interrupted(Exception):
    """SIGTERM or Ctrl-C stopped a cell in `phase` (pretraining, scoring or fine-tuning) after saving what the phase
    had; the same command continues it. `finished`: it came once every cell was done (`phase` says when), and the
    report was written before it stopped, its record as `record` (what `compare` would have returned). `exit_code`
    is the shell's for the signal (130, 143)."""

    def __init__(self, signal_name: str, exit_code: int, phase: str, finished: bool = False, record=None):
        super().__init__(f"stopped by {signal_name} {phase if finished else f'while {phase}'}")
        self.signal_name, self.exit_code, self.phase, self.finished = signal_name, exit_code, phase, finished
        self.record = record


def probe(study, checkpoint: Path, seed: int) -> dict:
    """kNN (k=20, cosine and standardised) and the linear probe on val/, top-1 in %: `pretexts probe`'s numbers,
    on images decoded once for the whole comparison (engine/compare/inputs.py)."""
    cfg = ProbeConfig(
        checkpoint=str(checkpoint),
        data=study.data,
        probes=("knn", "knn-std", "linear"),
        probe_args={"knn_k": (20,)},
        seed=seed,
        max_images=study.max_images,
        workers=0,
        device=study.device,
        quiet=True,
    )
    device = resolve_device(study.device)
    weights = load_backbone(cfg.checkpoint, seed=seed)
    backbone = weights.model.to(device)
    train_set, val_set, classes = probe_inputs(
        study.data, weights.img_size, *normalisation(backbone), cfg.crop_pct, seed, study.max_images
    )
    torch.manual_seed(seed)
    train = extract_features(backbone, train_set, device, workers=0)
    val = extract_features(backbone, val_set, device, workers=0)
    results = {
        name: PROBES.get(name)(train, val, len(classes), cfg, **cfg.probe_params(name))[0] for name in cfg.probes
    }
    return {
        "knn": results["knn"]["k=20"],
        "knn_std": results["knn-std"]["k=20"],
        "linear": results["linear"]["top1"],
        "val_images": val[0].shape[0],
    }


def finetune(study, checkpoint: Path, seed: int, out: Path | None = None, **changes) -> dict:
    """The small-data fine-tuning recipe (engine/evaluation/finetune_recipes.py) for the study's epochs; top-1 per
    epoch shows whether it has settled. `changes`: FinetuneConfig fields over it; `out`: the run's folder, beside
    the checkpoint unless given. A fine-tune stopped before (a checkpoint, no results.json) continues; one stopped
    now raises `Interrupted`."""
    out = Path(out or checkpoint.parent / "finetune")
    stopped = (out / "checkpoint.pt").is_file() and not (out / "results.json").is_file()
    cfg = FinetuneConfig(
        **{
            "checkpoint": str(checkpoint),
            "data": study.data,
            "recipe": "small",
            "max_images": study.max_images,
            "epochs": study.finetune_epochs,
            "batch_size": study.batch_size,
            "seed": seed,
            "workers": study.workers,  # 0 on a CPU; a GPU's fine-tune waits on one loader process otherwise
            "device": study.device,
            "amp": study.finetune_amp,
            "quiet": True,
            "force": True,
            "out": str(out),
            "resume": "auto" if stopped else None,
            **changes,
        }
    )
    tuner = Finetuner(cfg, echo=lambda line: None)
    results = tuner.run()
    if "interrupted" in results:
        raise Interrupted(results["interrupted"], results["exit_code"], "fine-tuning")
    return {
        "final": results["final_top1"],
        "best": results["best_top1"],
        "epochs": study.finetune_epochs,
        "precision": precision_name(tuner.dtype),
        "top1": results["top1"],
    }


def tuned_as_asked(record: dict, study) -> bool:
    """A cached fine-tune counts if it has the asked epochs and precision."""
    wanted = precision_name(amp_dtype(study.finetune_amp, resolve_device(study.device)))
    return record.get("epochs") == study.finetune_epochs and record.get("precision") == wanted
