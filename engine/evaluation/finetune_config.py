"""The typed configuration of a fine-tuning run. Defaults are the paper's (Appendix A, Table A)."""
from dataclasses import asdict, dataclass

from timm.data.auto_augment import rand_augment_transform

from pretexts.errors import ParameterError

from engine.training.config import check_field_types, check_ranges

RANDAUG_OFF = ("", "none", "off", "0")


@dataclass
class FinetuneConfig:
    """Everything `engine.finetune` needs; the CLI builds one of these, so does the Python API.

    `checkpoint` is a `pretexts train` checkpoint; `from_scratch` runs the same recipe on a randomly
    initialised `backbone` instead (the supervised baseline). Epochs and warm-up follow MAE's
    fine-tuning of the paper's models (100 and 5); the batch is smaller than the paper's 1024 so the
    default fits small data, and the lr keeps the paper's scaling rule base_lr x batch / 256.
    """

    checkpoint: str | None = None
    from_scratch: bool = False
    backbone: str | None = None       # from scratch: alias or timm name; from a checkpoint: its own
    img_size: int | None = None       # None: the checkpoint's, or 32 from scratch
    data: str = "sample"              # "sample", "synthetic", an ImageFolder dir with train/ and val/
    label_fraction: float | None = None  # 0.01 / 0.1: the paper's 1 % / 10 % semi-supervised rows
    epochs: int = 100
    warmup_epochs: float = 5.0
    batch_size: int = 64
    accum_iter: int = 1               # run each step's batch as this many micro-batches (less memory, same step)
    lr: float | None = None           # None: base_lr * batch_size / 256
    base_lr: float = 1e-3             # Table A
    min_lr: float = 1e-6
    weight_decay: float = 0.05        # Table A
    betas: tuple = (0.9, 0.999)       # Table A
    layer_decay: float = 0.75         # Table A; 1.0 turns it off
    drop_path: float = 0.1            # Table A
    # RandAugment (9, 0.5), Table A. MAE writes "-inc1", whose posterize reaches 0 bits at the top of the
    # noisy magnitude, which current Pillow refuses; "none" turns it off
    randaug: str = "rand-m9-mstd0.5"
    crop_min_scale: float = 0.08      # RandomResizedCrop's smallest area (timm's default)
    crop_pct: float = 0.875           # evaluation: resize to img_size / crop_pct, centre crop
    smoothing: float = 0.1            # label smoothing, Table A
    mixup: float = 0.8                # Table A
    cutmix: float = 1.0               # Table A
    mixup_prob: float = 1.0
    mixup_switch_prob: float = 0.5
    clip_grad: float | None = None
    amp: str = "auto"                 # "auto" (bf16 on CUDA, off on CPU), "bf16", "fp16", "off"
    seed: int = 0
    workers: int = 2
    quiet: bool = False               # no progress bars (they are off anyway when the output is not a terminal)
    device: str = "auto"
    max_steps_per_epoch: int | None = None
    out: str = "runs/finetune"
    resume: str | None = None         # a fine-tuning checkpoint, or "auto" for OUT/checkpoint.pt
    force: bool = False               # start over in an OUT that holds a run (its checkpoint and log are removed)

    def __post_init__(self):
        check_field_types(self)
        if self.checkpoint and self.from_scratch:
            raise ParameterError("give either --checkpoint (fine-tune a pretrained backbone) or --from-scratch, not both.")
        if not self.checkpoint and not self.from_scratch:
            raise ParameterError("give --checkpoint CKPT (a `pretexts train` checkpoint) or --from-scratch --backbone NAME.")
        if self.from_scratch and not self.backbone:
            raise ParameterError("--from-scratch needs --backbone NAME (e.g. resnet18, convnext_atto, vit_tiny).")
        if self.label_fraction is not None and not 0 < self.label_fraction <= 1:
            raise ParameterError(f"label_fraction must be in (0, 1] (0.01 or 0.1 in the paper), got {self.label_fraction}.")
        check_ranges(self, positive=("epochs", "batch_size", "accum_iter", "base_lr", "lr", "img_size",
                                     "max_steps_per_epoch", "clip_grad"),
                     non_negative=("smoothing", "mixup", "cutmix", "drop_path", "warmup_epochs", "weight_decay",
                                   "min_lr", "workers"),
                     fractions=("layer_decay", "crop_min_scale", "crop_pct", "mixup_prob", "mixup_switch_prob"))
        if self.batch_size % self.accum_iter:
            raise ParameterError(f"--accum-iter {self.accum_iter} must divide --batch-size {self.batch_size} into "
                                 f"equal micro-batches.")
        if self.randaug_policy:
            try:
                rand_augment_transform(self.randaug_policy, {})
            except (AssertionError, ValueError, IndexError, KeyError):
                raise ParameterError(f"randaug '{self.randaug}' is not a timm RandAugment policy; use e.g. "
                                     f"rand-m9-mstd0.5 (the paper's), or none.") from None
        if self.mixing and self.batch_size % 2:
            raise ParameterError(f"mixup/cutmix mix pairs of images and need an even batch size, got {self.batch_size}.")
        if self.amp not in ("auto", "bf16", "fp16", "off"):
            raise ParameterError(f"amp must be one of auto, bf16, fp16, off; got {self.amp!r}.")
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
