"""Export a pretrained backbone as a timm weights file that `timm.create_model(..., pretrained=True)` loads."""
import json
from pathlib import Path

from safetensors.torch import save

from .checkpoint import atomic_save
from .preflight import check_output_dir
from .pretrained import create_classifier, timm_spec


def timm_load_line(timm_name: str, kwargs: dict, file: str) -> str:
    """The one line of Python that rebuilds the exported backbone with timm alone.

    num_classes=0 in the overlay matches the file (no classifier), which keeps timm's load strict.
    """
    args = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return (f"timm.create_model({timm_name!r}, pretrained=True, "
            f"pretrained_cfg_overlay=dict(file={file!r}, num_classes=0), num_classes=0{args})")


def export_backbone(checkpoint: str, out: str) -> dict:
    """Write the backbone of `checkpoint` to `out` (.safetensors, or a torch file for any other suffix).

    Also writes OUT with suffix .json: the timm name, kwargs, the load line and where the weights came from.
    """
    model, saved = create_classifier(checkpoint, num_classes=0)
    timm_name, kwargs = timm_spec(saved["backbone"], saved["img_size"], model)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    path = Path(out)
    check_output_dir(path.parent, sum(t.numel() * t.element_size() for t in state.values()))
    if path.suffix == ".safetensors":
        atomic_save(state, path, lambda tensors, fh: fh.write(save(tensors, metadata={"timm_name": timm_name})))
    else:
        atomic_save(state, path)
    info = {"file": str(path), "timm_name": timm_name, "kwargs": kwargs, "tensors": len(state),
            "parameters": sum(p.numel() for p in model.parameters()),
            "load": timm_load_line(timm_name, kwargs, str(path)), "checkpoint": str(checkpoint),
            "pretraining": {k: saved.get(k) for k in ("method", "task", "task_args", "backbone", "img_size")}}
    path.with_suffix(".json").write_text(json.dumps(info, indent=2))
    return info
