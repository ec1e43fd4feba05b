"""Export a pretrained or fine-tuned backbone for timm: a Hub-ready folder, or a single weights file.

A folder is what timm's `save_for_hf` writes (model.safetensors and a config.json carrying the
architecture, its arguments, input size, mean and std), so `timm.create_model("local-dir:OUT",
pretrained=True)` rebuilds the model, and `push_to_hf_hub` uploads the same files.
"""

import shutil
import tempfile
from pathlib import Path

import timm
import torch
from safetensors.torch import save
from timm.models import push_to_hf_hub, save_for_hf

from pretexts.backbones.normalisation import normalisation
from pretexts.engine.evaluation.pretrained import create_classifier, timm_spec
from pretexts.engine.training.checkpoint import atomic_save, load_checkpoint, load_weights
from pretexts.engine.training.preflight import check_output_dir
from pretexts.engine.training.run_folder import RunLock, claim_output_dir, claim_output_file, write_json
from pretexts.errors import OutputError

WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
# the architecture's own pretrained tag (e.g. augreg_in21k) and licence (timm's weights are mostly apache-2.0)
# would claim weights these are not: these are pretexts' own, under the project's MIT licence
LICENSE = "mit"
HUB_CONFIG = {"pretrained_cfg": {"tag": "pretexts", "license": LICENSE}}


def hub_config(classes: list | None) -> dict:
    """timm's model_config: the tag and licence, and a classifier's class names as timm's `label_names` (the
    Hub shows them; `model.pretrained_cfg["label_names"]` after loading)."""
    return {**HUB_CONFIG, "label_names": list(classes)} if classes else HUB_CONFIG


def load_for_export(checkpoint: str) -> tuple[torch.nn.Module, str, dict, dict]:
    """(timm model in eval mode, timm name, its kwargs, where it came from) for any checkpoint pretexts writes:
    a pretraining checkpoint (the backbone, no classifier), a fine-tuning run's checkpoint.pt or finetuned.pt
    (the classifier with its head; best.pt, the best epoch's, alike)."""
    ckpt = load_checkpoint(checkpoint, kinds=("pretrain", "finetune", "finetuned"))
    if ckpt.get("kind") in ("finetune", "finetuned"):
        spec = ckpt["timm"]
        model = timm.create_model(spec["name"], pretrained=False, **spec["kwargs"])
        load_weights(model, ckpt["model"], checkpoint, spec["name"], "was it written by another version?")
        provenance = {
            "fine_tuned": {
                **{k: ckpt["config"].get(k) for k in ("checkpoint", "data", "epochs")},
                "epoch": ckpt.get("epoch"),
                "val_top1": ckpt.get("top1"),
            },
            "classes": spec.get("classes"),
        }
        return model.eval(), spec["name"], spec["kwargs"], provenance
    model, saved = create_classifier(checkpoint, num_classes=0)
    timm_name, kwargs = timm_spec(saved["backbone"], saved["img_size"], model, saved.get("global_pool"))
    kwargs = {**kwargs, "num_classes": 0}
    pretraining = {
        k: saved.get(k)
        for k in ("method", "method_args", "task", "task_args", "backbone", "global_pool", "img_size", "data")
    }
    return model.eval(), timm_name, kwargs, {"pretraining": pretraining}


def data_config(model: torch.nn.Module, img_size: int) -> dict:
    """The preprocessing the weights were trained with: the run's size, not the architecture's 224 px default."""
    mean, std = normalisation(model)
    return {
        "input_size": (3, img_size, img_size),
        "mean": mean,
        "std": std,
        "crop_pct": model.pretrained_cfg.get("crop_pct", 0.875),
    }


def model_img_size(model: torch.nn.Module, kwargs: dict, checkpoint: dict | None = None) -> int:
    size = kwargs.get("img_size") or (checkpoint or {}).get("img_size") or 32
    return size[0] if isinstance(size, (tuple, list)) else int(size)


def load_line(timm_name: str, kwargs: dict, target: str, data: dict) -> str:
    """The one line of Python that rebuilds the exported model with timm alone."""
    if Path(target).suffix not in WEIGHT_SUFFIXES:
        return f"timm.create_model({'local-dir:' + target!r}, pretrained=True)"
    overlay = {
        "file": target,
        "num_classes": kwargs.get("num_classes", 0),
        "input_size": data["input_size"],
        "mean": data["mean"],
        "std": data["std"],
    }
    args = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return f"timm.create_model({timm_name!r}, pretrained=True, pretrained_cfg_overlay={overlay!r}{args})"


def export_backbone(
    checkpoint: str, out: str, push_to_hub: str | None = None, private: bool = False, force: bool = False
) -> dict:
    """Export `checkpoint` to `out`: a folder (Hub-ready, the default) or a weights file (.safetensors, .pth).

    Writes `pretexts.json` in the folder (OUT with suffix .json for a file): the timm name, arguments, load
    line and provenance. With `push_to_hub`, uploads the folder's files to that Hub repository (timm's
    `push_to_hf_hub`; needs a token from `huggingface-cli login` or HF_TOKEN). An existing export or run is
    replaced only with `force`, and the checkpoint never.
    """
    path = Path(out)
    if path.suffix in WEIGHT_SUFFIXES:
        claim_output_file(path, force, inputs=[checkpoint], companions=[path.with_suffix(".json")])
        return export_to(checkpoint, path, push_to_hub, private)
    with RunLock(path, "export"):
        claim_output_dir(path, None, force, inputs=[checkpoint], resumable=False)
        return export_to(checkpoint, path, push_to_hub, private)


def export_to(checkpoint: str, path: Path, push_to_hub: str | None, private: bool) -> dict:
    model, timm_name, kwargs, provenance = load_for_export(checkpoint)
    data = data_config(model, model_img_size(model, kwargs, provenance.get("pretraining")))
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    is_file = path.suffix in WEIGHT_SUFFIXES
    check_output_dir(path.parent if is_file else path, sum(t.numel() * t.element_size() for t in state.values()))
    if is_file:
        if path.suffix == ".safetensors":
            atomic_save(state, path, lambda tensors, fh: fh.write(save(tensors, metadata={"timm_name": timm_name})))
        else:
            atomic_save(state, path)
    else:
        write_folder(model, path, kwargs, data, provenance.get("classes"))
    info = {
        "file": str(path),
        "timm_name": timm_name,
        "kwargs": kwargs,
        "tensors": len(state),
        "parameters": sum(p.numel() for p in model.parameters()),
        "input_size": list(data["input_size"]),
        "mean": list(data["mean"]),
        "std": list(data["std"]),
        "license": LICENSE,
        "load": load_line(timm_name, kwargs, str(path), data),
        "checkpoint": str(checkpoint),
        **provenance,
    }
    write_json(path.with_suffix(".json") if is_file else path / "pretexts.json", info)
    if push_to_hub:
        try:
            info["hub"] = str(
                push_to_hf_hub(
                    model,
                    push_to_hub,
                    model_config=hub_config(provenance.get("classes")),
                    model_card={"license": LICENSE},
                    model_args=kwargs,
                    data_config=data,
                    private=private,
                    commit_message=f"pretexts export of {Path(checkpoint).name}",
                    safe_serialization=True,
                )
            )
        except Exception as err:  # auth, network, a bad repo name: the local export is already complete
            raise OutputError(
                f"wrote {path}, but the upload to '{push_to_hub}' failed ({type(err).__name__}: "
                f"{' '.join(str(err).split())[:200]}); log in with `huggingface-cli login` or set "
                f"HF_TOKEN, then run the export again."
            ) from None
    return info


def write_folder(model: torch.nn.Module, path: Path, kwargs: dict, data: dict, classes: list | None = None) -> None:
    """timm's `save_for_hf` into a temporary sibling, then moved into place: a failed export leaves no half folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save_for_hf(
            model,
            str(staging),
            model_config=hub_config(classes),
            model_args=kwargs,
            data_config=data,
            safe_serialization=True,
        )
        path.mkdir(exist_ok=True)
        for item in staging.iterdir():
            item.replace(path / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
