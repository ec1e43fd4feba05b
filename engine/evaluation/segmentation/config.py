"""Settings of `pretexts segment`; defaults are MAE's ADE20K recipe (UperNet, AdamW, lr 1e-4, layer decay 0.65)."""

from dataclasses import MISSING, asdict, dataclass

from pretexts.engine.training.config import (
    IMG_SIZE_RANGE,
    SEED_RANGE,
    amp_setting,
    check_amp,
    check_field_types,
    check_optimizer,
    check_ranges,
    clip_grad_setting,
    log_every_setting,
    setting,
    skip_nonfinite_setting,
)


@dataclass
class SegmentConfig:
    data: str = setting(
        MISSING,
        "ADE20K folder (images/ + annotations/), generic folder (images/ + masks/), or 'generated'.",
        section="data",
    )
    out: str = setting("runs/segment", "Output folder.", section="output")
    force: bool = setting(
        False, "Start over in an --out that already holds a run (its files are removed).", section="output"
    )
    checkpoint: str | None = setting(None, "A checkpoint.pt written by `pretexts train`.", section="model")
    backbone: str | None = setting(
        None, "Backbone name with --from-scratch (vit_tiny, resnet18, ...).", section="model"
    )
    img_size: int | None = setting(None, "Crop size; default the checkpoint's size.", section="data")
    head: str = setting(
        "upernet", "Decoder head: UperNet (PPM + FPN, MAE) or linear.", choices=("upernet", "linear"), section="model"
    )
    num_classes: int | None = setting(None, "Default: 150 (ADE20K) or inferred from masks.", section="data")
    epochs: int = setting(10, "Passes over the training images.", section="optimisation")
    max_steps: int | None = setting(
        None, "Total iterations; overrides --epochs (160000 in MAE).", section="optimisation"
    )
    batch_size: int = setting(16, "Batch of crops.", section="optimisation")
    lr: float = setting(1e-4, "AdamW peak lr (MAE: 1e-4).", section="optimisation")
    weight_decay: float = setting(0.05, "AdamW weight decay.", section="optimisation")
    layer_decay: float = setting(0.65, "Layer-wise lr decay (MAE: 0.65).", section="optimisation")
    warmup_steps: int = setting(0, "Linear lr warm-up iterations.", section="optimisation")
    clip_grad: float | None = clip_grad_setting()
    skip_nonfinite: bool = skip_nonfinite_setting()
    eval_mode: str = setting(
        "whole", "Evaluate on whole images or by sliding window.", choices=("whole", "slide"), section="output"
    )
    amp: str = amp_setting()
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", section="speed")
    seed: int = setting(0, "Seeds the crops, the order and the head.", section="optimisation")
    workers: int = setting(0, "Data loader worker processes.", section="speed")
    quiet: bool = setting(False, "No per-epoch lines.", section="logging")
    log_every: int | None = log_every_setting()

    def __post_init__(self):
        check_field_types(self)
        check_ranges(
            self,
            positive=("num_classes", "epochs", "max_steps", "batch_size", "clip_grad", "log_every"),
            non_negative=("weight_decay", "warmup_steps", "workers"),
            fractions=("layer_decay",),
            within={"seed": SEED_RANGE, "img_size": IMG_SIZE_RANGE},
        )
        check_optimizer(self)
        check_amp(self)

    def to_dict(self) -> dict:
        return asdict(self)
