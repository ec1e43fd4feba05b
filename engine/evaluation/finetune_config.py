"""The typed configuration of a fine-tuning run. Defaults are the paper's (Appendix A, Table A)."""

from dataclasses import asdict, dataclass

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
from pretexts.errors import ParameterError

RANDAUG_OFF = ("", "none", "off", "0")


@dataclass
class FinetuneConfig:
    """Everything `engine.finetune` needs; the CLI builds one of these, so does the Python API.

    `checkpoint` is a `pretexts train` checkpoint; `from_scratch` runs the same recipe on a randomly
    initialised `backbone` instead (the supervised baseline). `data` left out is the checkpoint's pretraining
    data, or the embedded sample from scratch (a random backbone records none); `Finetuner` fills it in.
    Epochs and warm-up follow MAE's fine-tuning of the paper's models (100 and 5); the batch is smaller than the paper's
    1024 so the default fits small data, and the lr keeps the paper's scaling rule base_lr x batch / 256.
    """

    checkpoint: str | None = setting(None, "A checkpoint.pt written by `pretexts train`.", section="model")
    from_scratch: bool = setting(False, "Same recipe on a random backbone (the baseline).", section="model")
    backbone: str | None = setting(
        None, "With --from-scratch: alias (resnet18, vit_tiny, ...) or timm name.", section="model"
    )
    img_size: int | None = setting(
        None, "With --from-scratch. Default 32; a checkpoint's own otherwise.", section="data"
    )
    # None: the checkpoint's pretraining data (its config records it); the embedded sample with --from-scratch
    data: str | None = setting(
        None,
        "A folder with train/ and val/ class folders, or 'sample' (embedded). Default: "
        "the data the checkpoint was pretrained on; 'sample' with --from-scratch.",
        section="data",
    )
    label_fraction: float | None = setting(
        None,
        "Fine-tune on a class-balanced seeded subset: 0.01 or 0.1 (the paper's semi-supervised rows).",
        section="data",
    )
    epochs: int = setting(100, "Fine-tuning epochs (paper, Table A).", section="optimisation")
    warmup_epochs: float = setting(5.0, "Linear warm-up epochs.", section="optimisation")
    batch_size: int = setting(64, "Batch size of each optimiser step.", section="optimisation")
    accum_iter: int = setting(
        1,
        "Gradient accumulation: run each step's batch as this many micro-batches (the memory"
        " of batch / K images, the step of the whole batch).",
        section="speed",
    )
    lr: float | None = setting(None, "Peak lr. Default base lr x batch / 256.", section="optimisation")
    base_lr: float = setting(1e-3, "lr per 256 images (paper, Table A).", section="optimisation")
    min_lr: float = setting(1e-6, "End of the cosine decay.", section="optimisation")
    weight_decay: float = setting(0.05, "AdamW's weight decay (Table A).", section="optimisation")
    betas: tuple = setting((0.9, 0.999), "AdamW's betas.", metavar="B1 B2", nargs=2, section="optimisation")
    layer_decay: float = setting(0.75, "Layer-wise lr decay; 1 turns it off (Table A).", section="optimisation")
    drop_path: float = setting(0.1, "Stochastic depth rate (Table A).", section="optimisation")
    # RandAugment (9, 0.5), Table A. MAE writes "-inc1", whose posterize reaches 0 bits at the top of the
    # noisy magnitude, which current Pillow refuses; "none" turns it off
    randaug: str = setting(
        "rand-m9-mstd0.5", "timm RandAugment policy (Table A); 'none' turns it off.", section="augmentation"
    )
    crop_min_scale: float = setting(0.08, "RandomResizedCrop's smallest area.", section="augmentation")
    # evaluation: resize to img_size / crop_pct, centre crop
    crop_pct: float = setting(0.875, "Evaluation centre crop fraction.", section="data")
    smoothing: float = setting(0.1, "Label smoothing (Table A).", section="augmentation")
    mixup: float = setting(0.8, "Mixup alpha; 0 turns it off (Table A).", section="augmentation")
    cutmix: float = setting(1.0, "CutMix alpha; 0 turns it off (Table A).", section="augmentation")
    mixup_prob: float = setting(1.0, "Share of batches mixed (timm Mixup's prob).", section="augmentation")
    mixup_switch_prob: float = setting(
        0.5, "Share of mixed batches that use CutMix when both are on.", section="augmentation"
    )
    clip_grad: float | None = clip_grad_setting()
    skip_nonfinite: bool = skip_nonfinite_setting()
    amp: str = amp_setting()
    seed: int = setting(0, "Seeds the data order, the augmentation and the head.", section="optimisation")
    workers: int = setting(2, "Data loader worker processes.", section="speed")
    quiet: bool = setting(False, "No progress bars, no per-epoch lines.", section="logging")
    log_every: int | None = log_every_setting()
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", section="speed")
    max_steps_per_epoch: int | None = setting(None, "Cap the optimiser steps of each epoch.", section="optimisation")
    out: str = setting("runs/finetune", "Output folder.", section="output")
    # a fine-tuning checkpoint, or "auto" for OUT/checkpoint.pt
    resume: str | None = setting(
        None,
        "Continue from OUT/checkpoint.pt (saved after each epoch), or from the checkpoint given.",
        flag_value="auto",
        section="output",
    )
    force: bool = setting(
        False, "Start over in an --out that already holds a run (its checkpoint and log are removed).", section="output"
    )

    def __post_init__(self):
        check_field_types(self)
        if self.checkpoint and self.from_scratch:
            raise ParameterError(
                "give either --checkpoint (fine-tune a pretrained backbone) or --from-scratch, not both."
            )
        if not self.checkpoint and not self.from_scratch:
            raise ParameterError(
                "give --checkpoint CKPT (a `pretexts train` checkpoint) or --from-scratch --backbone NAME."
            )
        if self.from_scratch and not self.backbone:
            raise ParameterError("--from-scratch needs --backbone NAME (e.g. resnet18, convnext_atto, vit_tiny).")
        if self.label_fraction is not None and not 0 < self.label_fraction <= 1:
            raise ParameterError(
                f"label_fraction must be in (0, 1] (0.01 or 0.1 in the paper), got {self.label_fraction}."
            )
        check_ranges(
            self,
            positive=("epochs", "batch_size", "accum_iter", "max_steps_per_epoch", "clip_grad", "log_every"),
            non_negative=("smoothing", "mixup", "cutmix", "drop_path", "warmup_epochs", "weight_decay", "workers"),
            fractions=("layer_decay", "crop_min_scale", "crop_pct", "mixup_prob", "mixup_switch_prob"),
            within={"seed": SEED_RANGE, "img_size": IMG_SIZE_RANGE},
        )
        check_optimizer(self)
        if self.batch_size % self.accum_iter:
            raise ParameterError(
                f"--accum-iter {self.accum_iter} must divide --batch-size {self.batch_size} into equal micro-batches."
            )
        if self.randaug_policy:
            from timm.data.auto_augment import rand_augment_transform  # here: the CLI reads this module light

            try:
                rand_augment_transform(self.randaug_policy, {})
            except (AssertionError, ValueError, IndexError, KeyError):
                raise ParameterError(
                    f"randaug '{self.randaug}' is not a timm RandAugment policy; use e.g. "
                    f"rand-m9-mstd0.5 (the paper's), or none."
                ) from None
        if self.mixing and self.batch_size % 2:
            raise ParameterError(
                f"mixup/cutmix mix pairs of images and need an even batch size, got {self.batch_size}."
            )
        check_amp(self)
        self.betas = tuple(self.betas)

    @property
    def mixing(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0

    @property
    def randaug_policy(self) -> str | None:
        return None if str(self.randaug).lower() in RANDAUG_OFF else self.randaug

    @property
    def peak_lr(self) -> float:
        """lr = base_lr x batch / 256, the linear scaling rule (MAE, and the paper's Table A)."""
        return self.lr if self.lr is not None else self.base_lr * self.batch_size / 256

    def to_dict(self) -> dict:
        return asdict(self)
