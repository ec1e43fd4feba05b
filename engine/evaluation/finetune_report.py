"""A fine-tuning run's report: OUT/results.json, its scores beside their `reference` (the val set's chance level,
the Wilson 95 % intervals of the final and best top-1, the random-init reference)."""

from typing import TYPE_CHECKING

from torch.utils.data import Dataset, Subset
from torchvision.datasets import DatasetFolder

from pretexts.engine.data.labelled_data import labels_of
from pretexts.engine.evaluation.linear_probe_protocol import protocol
from pretexts.engine.evaluation.pretrained import pretraining_record
from pretexts.engine.measures.reference import Reference, random_init_note
from pretexts.engine.training.arithmetic import arithmetic
from pretexts.engine.training.precision import precision_name

if TYPE_CHECKING:
    from pretexts.engine.evaluation.finetune import Finetuner

FINAL, BEST = "finetuned.pt", "best.pt"  # the last epoch's weights; the best epoch's by val top-1


def finetune_results(tuner: "Finetuner", seconds: float) -> dict:
    """results.json of a run whose epochs are all done (`tuner.history`, one row an epoch)."""
    cfg, history = tuner.cfg, tuner.history
    best = max(history, key=lambda r: r["top1"])  # the first of equals, as best.pt keeps it
    return {
        "protocol": protocol(cfg.linear_probe),  # what was trained: the head alone, or everything
        "top1": [r["top1"] for r in history],
        "final_top1": history[-1]["top1"],
        "best_top1": best["top1"],
        "best_epoch": best["epoch"],
        "epochs": cfg.epochs,
        "weights": {"final": FINAL, "best": BEST},
        "accuracy": f"top-1 in percent on {measured_on(tuner.val_set.source)}",
        "optimizer_steps": tuner.global_step,
        "skipped_nonfinite_steps": tuner.nonfinite.skipped,
        "seconds": seconds,
        "train_images": len(tuner.train_set),
        "val_images": len(tuner.val_set),
        "classes": len(tuner.classes),
        "reference": finetune_reference(tuner, history[-1]["top1"], best["top1"]),
        "processes": tuner.world,
        "arithmetic": arithmetic(tuner.device, tuner.world, precision_name(tuner.dtype)),
        "backbone": tuner.backbone_name,
        "checkpoint": cfg.checkpoint,
        "pretraining": pretraining_record(tuner.pretraining, ("method", "task", "task_args"))
        if tuner.pretraining
        else None,
    }


def measured_on(val: Dataset) -> str:
    """What the top-1 is measured on, in words: val/, the data's val split, or the share held out of a folder that
    has no val/ (5 % of each class, one fixed draw: `engine.data.datasets.held_out_split`)."""
    if isinstance(val, Subset):
        held = "held out (5 % of each class, the same whatever --seed) as it has no val/"
        return f"{len(val)} of the data's {len(val.dataset)} images, {held}"
    return "val/" if isinstance(val, DatasetFolder) else "the data's val split"


def finetune_reference(tuner: "Finetuner", final: float, best: float) -> dict:
    """results.json's "reference": the val set's size and chance level, the Wilson 95 % intervals of the final
    and best top-1 (the best is picked on the same images, so it reads high) and the random-init reference."""
    reference = Reference.of(labels_of(tuner.val_set.source), len(tuner.classes))
    return {
        **reference.to_dict(),
        "ci95": {"final_top1": list(reference.interval(final)), "best_top1": list(reference.interval(best))},
        "random_init": random_init_note(
            "finetune",
            tuner.cfg.from_scratch,
            tuner.backbone_name,
            tuner.cfg.data,
            tuner.img_size,
            tuner.start_positions,
        ),
    }
