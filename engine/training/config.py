"""The typed configuration of a pretraining run. Optimiser defaults come from a named recipe
(engine/training/recipes.py): `recipe="paper"` gives the paper's Appendix A, Table A values exactly."""
import os
import typing
from dataclasses import asdict, dataclass, field, fields

from pretexts.errors import ParameterError

from engine.training.experiment_log import check_logger
from engine.methods.grad_modes import FD_DELTA
from engine.training.recipes import apply_recipe


@dataclass
class PretrainConfig:
    """Everything `engine.pretrain` needs; the CLI builds one of these, so does the Python API."""

    method: str = "energy"            # "energy" (the paper), "ae", "mae", or a plugin's (engine.methods)
    task: str = "random-mask"         # the demo's: its restoration shows within 200 CPU steps (README, learning speed)
    task_args: dict = field(default_factory=dict)
    method_args: dict = field(default_factory=dict)  # the method's own options (e.g. MAE's mask_ratio)
    backbone: str = "convnext_atto"   # LayerNorm, 3.7 M params: learns within minutes on a CPU
    data: str = "sample"              # "sample", "synthetic", an ImageFolder dir, or a CIFAR-10 folder
    dataset: str | None = None        # a timm create_dataset name (torch/cifar100, hfds/...); --data is its root
    img_size: int = 32
    epochs: int = 40                  # 200 optimiser steps on the 320 embedded images: ~3 minutes on 2 CPU cores
    batch_size: int = 64              # global batch (split across ranks under torchrun)
    accum_iter: int = 1               # run each step's batch as this many micro-batches (less memory, same step)
    steps: int = 2                    # restoration steps N (paper: 2); 0: corrupted images as negatives (Fig. A)
    recipe: str = "fast"              # fills the None fields below: "paper" (Table A) or "fast" (engine/training/recipes.py)
    lr: float | None = None           # None: base_lr * batch_size / 256
    base_lr: float | None = None      # None: the recipe's (paper, Table A: 1e-4; fast: 1e-3)
    min_lr: float = 0.0
    schedule: str | None = None       # after the warm-up: "cosine" decay to min_lr (paper) or "constant"; None: the recipe's
    warmup_epochs: float = 1.0
    weight_decay: float | None = None  # None: the recipe's (both: 0.05, Table A)
    betas: tuple | None = None        # None: the recipe's (both: 0.9, 0.95, Table A)
    loss: str = "mse"                 # "mse" (eq. 5) or "smooth_l1" (appendix pseudo code)
    alpha: float | None = None        # initial step size; None: the recipe's (both: 0.1, Appendix A.1)
    alpha_lr_scale: float | None = None  # alpha's lr relative to the network's; None: the recipe's (paper 1, fast 400)
    head_init_std: float | None = None  # None: PyTorch's default Linear init
    energy_scale: float = 1.0
    amp: str = "auto"                 # "auto" (bf16 on CUDA, off on CPU), "bf16", "fp16", "off"
    grad_mode: str = "exact"          # "exact" (double backward, paper) or "finite-difference" (engine/methods/grad_modes.py)
    fd_delta: float = FD_DELTA        # finite-difference perturbation, RMS per element of the state
    compile: str | None = None        # a torch.compile backend ("inductor", "aot_eager"); finite-difference only
    grad_checkpointing: bool = False  # timm's non-reentrant activation checkpointing: less memory, more time
    channels_last: bool = False       # NHWC memory format for convolutional backbones
    clip_grad: float | None = None
    seed: int = 0
    out: str = "runs/pretrain"
    resume: str | None = None         # a checkpoint path, or "auto" for OUT/checkpoint.pt
    force: bool = False               # start over in an OUT that holds a run (its checkpoint and log are removed)
    workers: int = 2
    quiet: bool = False               # no progress bars (they are off anyway when the output is not a terminal)
    device: str = "auto"
    max_steps_per_epoch: int | None = None
    figure_images: int = 8
    eval_images: int = 256            # held-out images for the restoration-error report
    eval_every: int | None = None     # also log the held-out error every this many optimiser steps
    logger: str = "jsonl"             # also log to "tensorboard" (OUT/tensorboard) or "wandb"; log.jsonl is always written
    skip_nonfinite: bool = False      # skip (and count) a step whose loss is NaN/inf instead of stopping

    def __post_init__(self):
        check_field_types(self)
        apply_recipe(self)
        check_ranges(self, positive=("epochs", "batch_size", "accum_iter", "img_size", "base_lr", "alpha",
                                     "alpha_lr_scale",
                                     "energy_scale", "fd_delta", "lr", "max_steps_per_epoch", "clip_grad",
                                     "head_init_std", "eval_every"),
                     non_negative=("steps", "workers", "warmup_epochs", "min_lr", "weight_decay", "eval_images",
                                   "figure_images"))
        if self.loss not in ("mse", "smooth_l1"):
            raise ParameterError(f"loss must be 'mse' or 'smooth_l1', got {self.loss!r}.")
        if self.amp not in ("auto", "bf16", "fp16", "off"):
            raise ParameterError(f"amp must be one of auto, bf16, fp16, off; got {self.amp!r}.")
        if self.grad_mode not in ("exact", "finite-difference"):
            raise ParameterError(f"grad_mode must be 'exact' or 'finite-difference', got {self.grad_mode!r}.")
        check_logger(self.logger)
        if self.compile and self.grad_mode == "exact":
            raise ParameterError("torch.compile has no double backward; use compile with "
                                 "--grad-mode finite-difference, or leave it off.")
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
        values = {"recipe": "paper", **values}  # a config saved before recipes existed ran the paper's
        return cls(**{k: v for k, v in values.items() if k in known})


def check_ranges(cfg, positive=(), non_negative=(), fractions=()) -> None:
    """ParameterError naming the first field out of its range: > 0, >= 0, or in (0, 1]. None is skipped."""
    for names, ok, allowed in ((positive, lambda v: v > 0, "> 0"), (non_negative, lambda v: v >= 0, ">= 0"),
                               (fractions, lambda v: 0 < v <= 1, "in (0, 1]")):
        for name in names:
            value = getattr(cfg, name)
            if value is not None and not ok(value):
                raise ParameterError(f"{name} must be {allowed}, got {value}.")


def check_field_types(cfg) -> None:
    """Each field holds its declared type, so the Python API gets a ParameterError, not a TypeError
    deep in the loop. An int may stand for a float, a list for a tuple (JSON), a Path for a str."""
    for f in fields(cfg):
        allowed = typing.get_args(f.type) or (f.type,)
        value = getattr(cfg, f.name)
        if not all(isinstance(t, type) for t in allowed) or isinstance(value, bool) and bool in allowed:
            continue
        if float in allowed and isinstance(value, int) and not isinstance(value, bool) \
                or tuple in allowed and isinstance(value, list):
            continue
        if str in allowed and isinstance(value, os.PathLike):
            setattr(cfg, f.name, os.fspath(value))
        elif not isinstance(value, allowed) or isinstance(value, bool):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
            raise ParameterError(f"{f.name} must be {names}, got {value!r}.")
