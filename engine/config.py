"""The typed configuration of a pretraining run. Defaults are the paper's (Appendix A, Table A)."""
from dataclasses import asdict, dataclass, field, fields

from pretexts.errors import ParameterError


@dataclass
class PretrainConfig:
    """Everything `engine.pretrain` needs; the CLI builds one of these, so does the Python API."""

    method: str = "energy"            # "energy" (the paper), or a baseline registered in engine.pretrain.TRAINERS
    task: str = "colorization"
    task_args: dict = field(default_factory=dict)
    backbone: str = "resnet18"
    data: str = "sample"              # "sample", "synthetic", an ImageFolder dir, or a CIFAR-10 folder
    img_size: int = 32
    epochs: int = 10
    batch_size: int = 64              # global batch (split across ranks under torchrun)
    steps: int = 2                    # restoration steps N (paper: 2)
    lr: float | None = None           # None: base_lr * batch_size / 256
    base_lr: float = 1e-4             # paper, Table A
    min_lr: float = 0.0
    warmup_epochs: float = 1.0
    weight_decay: float = 0.05
    betas: tuple = (0.9, 0.95)
    loss: str = "mse"                 # "mse" (eq. 5) or "smooth_l1" (appendix pseudo code)
    alpha: float = 0.1                # initial step size (paper, Appendix A.1)
    alpha_lr_scale: float = 1.0       # alpha's lr relative to the network's
    head_init_std: float | None = None  # None: PyTorch's default Linear init
    energy_scale: float = 1.0
    amp: str = "auto"                 # "auto" (bf16 on CUDA, off on CPU), "bf16", "fp16", "off"
    clip_grad: float | None = None
    seed: int = 0
    out: str = "runs/pretrain"
    resume: str | None = None         # a checkpoint path, or "auto" for OUT/checkpoint.pt
    workers: int = 2
    device: str = "auto"
    max_steps_per_epoch: int | None = None
    figure_images: int = 8
    eval_images: int = 256            # held-out images for the restoration-error report
    eval_every: int | None = None     # also log the held-out error every this many optimiser steps

    def __post_init__(self):
        positive = {"epochs": self.epochs, "batch_size": self.batch_size, "steps": self.steps,
                    "img_size": self.img_size, "base_lr": self.base_lr, "alpha": self.alpha,
                    "alpha_lr_scale": self.alpha_lr_scale, "energy_scale": self.energy_scale}
        if self.lr is not None:
            positive["lr"] = self.lr
        for name, value in positive.items():
            if not value > 0:
                raise ParameterError(f"{name} must be > 0, got {value}.")
        if self.workers < 0:
            raise ParameterError(f"workers must be >= 0, got {self.workers}.")
        if self.loss not in ("mse", "smooth_l1"):
            raise ParameterError(f"loss must be 'mse' or 'smooth_l1', got {self.loss!r}.")
        if self.amp not in ("auto", "bf16", "fp16", "off"):
            raise ParameterError(f"amp must be one of auto, bf16, fp16, off; got {self.amp!r}.")
        self.betas = tuple(self.betas)

    @property
    def peak_lr(self) -> float:
        """lr = base_lr x batch / 256, the linear scaling rule the paper follows from MAE."""
        return self.lr if self.lr is not None else self.base_lr * self.batch_size / 256

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "PretrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})
