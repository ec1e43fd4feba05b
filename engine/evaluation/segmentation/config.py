"""Settings of `pretexts segment`; defaults are MAE's and BEiT's ADE20K recipe (mmsegmentation's UperNet config:
AdamW, lr 1e-4, layer decay 0.65, drop path 0.1); the paper gives no segmentation settings."""

from dataclasses import MISSING, asdict, dataclass

from pretexts.engine.training.settings import (
    BATCH_RANGE,
    EPOCHS_RANGE,
    EVERY_STEPS_RANGE,
    FRACTION_RANGE,
    IMG_SIZE_RANGE,
    LR_RANGE,
    SEED_RANGE,
    STEPS_RANGE,
    WEIGHT_DECAY_RANGE,
    WORKERS_RANGE,
    Range,
    amp_setting,
    check_amp,
    check_field_types,
    check_optimizer,
    check_ranges,
    clip_grad_setting,
    cudnn_benchmark_setting,
    from_values,
    log_every_setting,
    setting,
    skip_nonfinite_setting,
    tf32_setting,
)


@dataclass
class SegmentConfig:
    data: str = setting(
        MISSING,
        "ADE20K folder (images/ + annotations/), generic folder (images/ + masks/), or 'generated' (not shards: "
        "they hold no masks).",
        section="data",
    )
    out: str = setting("runs/segment", "Output folder.", section="output")
    # a segmenter.pt, or "auto" for OUT/segmenter.pt
    resume: str | None = setting(
        None,
        "Continue from OUT/segmenter.pt (saved after each epoch), or from the segmenter.pt given.",
        flag_value="auto",
        section="output",
    )
    force: bool = setting(
        False,
        "Start over in an --out that already holds a run: what the run wrote there is removed, your own files kept.",
        section="output",
    )
    checkpoint: str | None = setting(None, "A checkpoint.pt written by `pretexts train`.", section="model")
    backbone: str | None = setting(
        None, "Backbone name with --from-scratch (vit_tiny, resnet18, ...).", section="model"
    )
    img_size: int | None = setting(
        None, "Crop size; default the checkpoint's size.", section="data", range=IMG_SIZE_RANGE
    )
    head: str = setting(
        "upernet", "Decoder head: UperNet (PPM + FPN, MAE) or linear.", choices=("upernet", "linear"), section="model"
    )
    # a mask's labels: 16-bit PNGs hold at most 65,536
    num_classes: int | None = setting(
        None, "Default: 150 (ADE20K) or inferred from masks.", section="data", range=(1, 65_536)
    )
    epochs: int = setting(10, "Passes over the training images.", section="optimisation", range=EPOCHS_RANGE)
    max_steps: int | None = setting(
        None,
        "Total iterations; overrides --epochs (MAE/BEiT: 160000).",
        section="optimisation",
        range=STEPS_RANGE,
    )
    batch_size: int = setting(16, "Batch of crops.", section="optimisation", range=BATCH_RANGE)
    lr: float = setting(1e-4, "AdamW peak lr (MAE/BEiT: 1e-4).", section="optimisation", range=LR_RANGE)
    weight_decay: float = setting(0.05, "AdamW weight decay.", section="optimisation", range=WEIGHT_DECAY_RANGE)
    layer_decay: float = setting(
        0.65, "Layer-wise lr decay (MAE/BEiT: 0.65).", section="optimisation", range=FRACTION_RANGE
    )
    drop_path: float = setting(
        0.1,
        "Stochastic depth rate of the backbone (MAE/BEiT: 0.1).",
        section="optimisation",
        range=Range(0, 1, high_open=True),
    )
    warmup_steps: int = setting(
        0, "Linear lr warm-up iterations (MAE/BEiT: 1500).", section="optimisation", range=EVERY_STEPS_RANGE
    )
    clip_grad: float | None = clip_grad_setting()
    skip_nonfinite: bool = skip_nonfinite_setting()
    eval_mode: str = setting(
        "whole", "Evaluate on whole images or by sliding window.", choices=("whole", "slide"), section="output"
    )
    amp: str = amp_setting()
    tf32: bool = tf32_setting()
    cudnn_benchmark: bool = cudnn_benchmark_setting()
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", section="speed")
    seed: int = setting(0, "Seeds the crops, the order and the head.", section="optimisation", range=SEED_RANGE)
    workers: int = setting(0, "Data loader worker processes.", section="speed", range=WORKERS_RANGE)
    quiet: bool = setting(False, "No per-epoch lines.", section="logging")
    log_every: int | None = log_every_setting()

    def __post_init__(self):
        check_field_types(self)
        check_ranges(self)
        check_optimizer(self)
        check_amp(self)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "SegmentConfig":
        """A saved config (a segmenter.pt's); one saved before `drop_path` was a setting trained without it, and a
        resume keeps that."""
        return from_values(cls, {"drop_path": 0.0, **values})

    @classmethod
    def resuming(cls, out: str, **changes) -> "SegmentConfig":
        """The config that continues the segmentation run in `out` from OUT/segmenter.pt, as `pretexts segment
        --resume` does: the checkpoint's saved settings with `changes` over them (`epochs=...` trains on, or
        `max_steps=...` where the run was planned by it). A change that would change the run is refused in one line.

        Raises:
            CheckpointError: There is no segmenter.pt to continue, or a change would change the run."""
        from pretexts.engine.evaluation.segmentation.train import Segmentation
        from pretexts.engine.training.resume_config import SEGMENT_MAY_CHANGE, resuming_config

        return resuming_config(cls, out, changes, "segmenter", SEGMENT_MAY_CHANGE, Segmentation.resume_file)
