"""Settings of `pretexts segment`; defaults are MAE's ADE20K recipe (UperNet, AdamW, lr 1e-4, layer decay 0.65)."""
from dataclasses import asdict, dataclass


@dataclass
class SegmentConfig:
    data: str
    out: str
    checkpoint: str | None = None
    backbone: str | None = None     # only with from_scratch; otherwise the checkpoint's
    img_size: int | None = None     # crop size; the checkpoint's pretraining size by default
    head: str = "upernet"           # upernet | linear
    num_classes: int | None = None  # inferred from the masks (generic) or 150 (ADE20K)
    epochs: int = 10
    max_steps: int | None = None
    batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 0.05
    layer_decay: float = 0.65
    warmup_steps: int = 0
    eval_mode: str = "whole"        # whole | slide
    device: str = "auto"
    seed: int = 0
    workers: int = 0

    def to_dict(self) -> dict:
        return asdict(self)
