"""The typed configuration of a pretraining run. Optimiser defaults come from a named recipe
(engine/training/recipes.py): `recipe="paper"` gives the paper's Appendix A, Table A values exactly."""

import math
import numbers
import os
import typing
from dataclasses import asdict, dataclass, field, fields

from pretexts.engine.training.experiment_log import check_logger
from pretexts.engine.training.recipes import apply_recipe
from pretexts.errors import ParameterError, UnknownNameError
from pretexts.registry import METHODS

# the sections of a command's --help, in order: each field names its own (`setting(..., section=...)`)
SECTIONS = {
    "data": "Data",
    "model": "Model",
    "optimisation": "Optimisation",
    "method": "Method options",
    "probes": "Probes",
    "augmentation": "Augmentation",
    "scoring": "Scoring",
    "output": "Output",
    "logging": "Monitoring and logging",
    "speed": "Device, speed and memory",
    "config": "Config and help",
}


@dataclass(frozen=True)
class Range:
    """The values a number field allows, `low` to `high`, each end included unless it is open. Declared once on
    the field (`setting(..., range=...)`): its option shows it in --help as click shows a range (`0<=x<1`), the
    config checks it (`check_ranges`: the option's value, a config file's, --set's, the Python API's, all refused in
    the same words), and tests/test_option_fuzz.py draws values from it. A tuple field's range holds for each item."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and (value < self.high if self.high_open else value <= self.high)

    def shown(self) -> str:
        """'0<=x<1': the range as click's --help writes it."""
        return f"{self.low}{'<' if self.low_open else '<='}x{'<' if self.high_open else '<='}{self.high}"

    def interval(self) -> str:
        """'[0, 1)': the range in the one-line error of a config value outside it."""
        return f"{'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"


def setting(default, help: str, *, section: str, range: Range | tuple | None = None, **cli):
    """A config field with its `--help` text, the `--help` section it is listed in (a key of `SECTIONS`) and, for
    a number, its allowed `range` (a `Range`, or (low, high) with both ends included); every number field declares
    one (tests/test_option_fuzz.py fails on one that does not). `cli` says how its option reads it where the type
    alone does not (option: another name, choices, nargs, multiple, flag_value, metavar). The CLI builds every
    option of train, finetune, probe, segment and compare from these (pretexts/cli/config_file.py: one source of
    defaults, help, sections and ranges)."""
    if section not in SECTIONS:
        raise ValueError(f"section must be one of {', '.join(SECTIONS)}, got {section!r}")
    bounds = {"range": range if isinstance(range, Range) else Range(*range)} if range is not None else {}
    return field(default=default, metadata={"help": help, "section": section, **bounds, **cli})


# the monitored metrics --keep-best takes, and whether higher is better (engine/training/monitor.py)
KEEP_BEST = {"knn_cosine": True, "knn_standardised": True, "rankme": True, "top_pc_share": False}

# fields a PretrainConfig had before they became the energy method's own options (its method_args): a config saved
# then holds them at the top level, a run of another method too, unused (`with_method_args` reads both)
FORMER_FIELDS = ("steps", "loss", "alpha", "alpha_lr_scale", "head_init_std", "energy_scale", "grad_mode", "fd_delta")

# the ranges the commands' options share (the bounds stop typos and runaway values, not unusual runs)
SEED_RANGE = Range(0, 2**32 - 1)  # numpy takes 32-bit seeds (torch 64-bit)
IMG_SIZE_RANGE = Range(8, 4096)  # the smallest image a backbone's stem downsamples, the largest that fits
EPOCHS_RANGE = Range(1, 100_000)  # the longest in the literature is MAE's 1600
WARMUP_EPOCHS_RANGE = Range(0, 100_000)
EVERY_EPOCHS_RANGE = Range(0, 100_000)  # "every this many epochs", 0: off or at the end
# optimiser steps: an epoch of ImageNet-21k at batch 1 is 14 M
STEPS_RANGE = Range(1, 100_000_000)
EVERY_STEPS_RANGE = Range(0, 100_000_000)
BATCH_RANGE = Range(1, 65_536)  # twice the largest batch in the SSL literature (32k, LARS/LAMB)
IMAGES_RANGE = Range(1, 100_000)  # held-out images scored: ImageNet's val/ has 50,000
# each loader worker is a process with its own copy of the dataset (over 600 filled 23 GB in an audit); a fixed
# bound, not one from os.cpu_count(), so a config valid on one machine is valid on every other and --help is the same
WORKERS_RANGE = Range(0, 64)
LR_RANGE = Range(0, 1, low_open=True)  # a larger step sends the weights to NaN
MIN_LR_RANGE = Range(0, 1)  # and <= the peak lr (check_optimizer)
WEIGHT_DECAY_RANGE = Range(0, 100)  # as the probe heads' (probe_config.py)
BETAS_RANGE = Range(0, 1, high_open=True)  # AdamW's running averages; 1 never forgets
CLIP_GRAD_RANGE = Range(0, 1_000_000, low_open=True)  # a norm no gradient reaches clips nothing
FRACTION_RANGE = Range(0, 1, low_open=True)


def amp_setting(bf16: str = '"bf16"'):
    """The `--amp` option every training command shares."""
    return setting(
        "auto",
        f'"auto" (bf16 on CUDA, off on CPU), {bf16}, "fp16", "off".',
        choices=("auto", "bf16", "fp16", "off"),
        section="speed",
    )


def clip_grad_setting():
    """`--clip-grad`, shared by every training command (they share `OptimizerStep`)."""
    return setting(None, "Clip the gradient norm to this value.", section="optimisation", range=CLIP_GRAD_RANGE)


def skip_nonfinite_setting():
    """`--skip-nonfinite`: `OptimizerStep` checks the loss, then the gradient norm."""
    return setting(
        False,
        "Skip (and count) a step whose loss or gradient norm is NaN or inf, instead of stopping the run.",
        section="optimisation",
    )


def check_amp(cfg) -> None:
    if cfg.amp not in ("auto", "bf16", "fp16", "off"):
        raise ParameterError(f"amp must be one of auto, bf16, fp16, off; got {cfg.amp!r}.")


def log_every_setting():
    """The `--log-every` option every training command shares (off a terminal, one line per epoch anyway)."""
    return setting(
        None,
        "Off a terminal, also print a progress line every this many optimiser steps (loss, lr, img/s, ETA).",
        section="logging",
        range=STEPS_RANGE,
    )


@dataclass
class PretrainConfig:
    """Everything `engine.pretrain` needs; the CLI builds one of these, so does the Python API."""

    # "energy" (the paper), "ae", "mae", or a plugin's (engine.methods)
    method: str = setting(
        "energy",
        "energy (the paper's), ae (autoencoder), mae (plain ViTs only), simmim (ViT, Swin, ConvNeXt, ResNet) or "
        "a plugin's (`pretexts list --methods`; `list --backbones`: which suits which backbone).",
        section="model",
    )
    # the demo's: its restoration shows within 200 CPU steps (docs/results/learning-speed.md)
    task: str = setting("random-mask", "Pretext task (see `pretexts list`).", section="model")
    task_args: dict = field(default_factory=dict)
    # the method's own options (the energy method's steps, alpha, grad_mode, ...; MAE's mask_ratio), checked and
    # given their defaults by the method (`Method.parse_args`); each is also its own `pretexts train` option
    method_args: dict = field(default_factory=dict)
    # LayerNorm, 3.7 M params: learns within minutes on a CPU
    backbone: str = setting(
        "convnext_atto", "Alias (vit_tiny, vit_small, swin_t, resnet18, ...) or timm name.", section="model"
    )
    data: str = setting(
        "sample",
        "'sample' (320 embedded CIFAR-10 images), 'synthetic', an ImageFolder dir or a CIFAR-10 folder.",
        section="data",
    )
    dataset: str | None = setting(
        None,
        "A timm create_dataset name (torch/cifar100, torch/mnist, hfds/NAME) whose "
        "files lie in --data; nothing is downloaded.",
        section="data",
    )
    img_size: int = setting(32, "Training resolution.", section="data", range=IMG_SIZE_RANGE)
    epochs: int = setting(
        40,
        "Passes over the training images (40: 200 optimiser steps of batch 64 on the 320 embedded images, 4.9 "
        "minutes measured on a 2-core CPU with another job on the second core).",
        section="optimisation",
        range=EPOCHS_RANGE,
    )
    # global batch (split across ranks under torchrun)
    batch_size: int = setting(64, "Global batch size.", section="optimisation", range=BATCH_RANGE)
    accum_iter: int = setting(
        1,
        "Gradient accumulation: run each step's batch as this many micro-batches (the memory"
        " of batch / K images, the step of the whole batch).",
        section="speed",
        range=BATCH_RANGE,
    )
    # fills the None fields below: "paper" (Table A), "fast" or "simmim" (engine/training/recipes.py)
    recipe: str = setting(
        "fast",
        "Optimiser defaults: 'fast' (base lr 1e-3, alpha lr x400), 'paper' "
        "(Table A exactly: base lr 1e-4, alpha lr x1) or 'simmim' (SimMIM's official "
        "pretraining: base lr 5e-5, betas 0.9 0.999, clip 5). Explicit options win.",
        section="optimisation",
    )
    lr: float | None = setting(
        None, "Peak lr. Default base lr x batch / 256 (paper).", section="optimisation", range=LR_RANGE
    )
    # None: the recipe's (paper, Table A: 1e-4; fast: 1e-3)
    base_lr: float | None = setting(
        None, "lr per 256 images. Default: the recipe's.", section="optimisation", range=LR_RANGE
    )
    min_lr: float = setting(0.0, "End of the cosine decay.", section="optimisation", range=MIN_LR_RANGE)
    schedule: str | None = setting(
        None,
        "After the warm-up: cosine (decay to --min-lr) or constant. Default: the recipe's.",
        section="optimisation",
    )
    warmup_epochs: float = setting(
        1.0, "Linear warm-up from 0 to the peak lr.", section="optimisation", range=WARMUP_EPOCHS_RANGE
    )
    # None: the recipe's (both: 0.05, Table A)
    weight_decay: float | None = setting(
        None,
        "AdamW's (norms, biases and alpha get none). Default: the recipe's.",
        section="optimisation",
        range=WEIGHT_DECAY_RANGE,
    )
    # None: the recipe's (both: 0.9, 0.95, Table A)
    betas: tuple | None = setting(
        None,
        "AdamW's betas. Default: the recipe's.",
        metavar="B1 B2",
        nargs=2,
        section="optimisation",
        range=BETAS_RANGE,
    )
    amp: str = amp_setting(
        '"bf16" (on a CPU too: the same held-out error; with native bf16 faster on larger steps, 7-9 % slower on '
        "convnext_atto at 32 px, docs/results/cpu-speed.md)"
    )
    compile: str | None = setting(
        None,
        "torch.compile (default backend inductor): the energy method's restoration "
        "step (both grad modes, exact gradients), other methods' backbone; what does "
        "not compile runs eagerly.",
        flag_value="inductor",
        metavar="[BACKEND]",
        section="speed",
    )
    grad_checkpointing: bool = setting(
        False, "Recompute activations in the backward (non-reentrant): less memory, more time.", section="speed"
    )
    channels_last: bool = setting(False, "NHWC memory format (convolutional backbones).", section="speed")
    clip_grad: float | None = clip_grad_setting()
    seed: int = setting(
        0, "Seeds the crops, the corruptions and the initialisation.", section="optimisation", range=SEED_RANGE
    )
    out: str = setting("runs/pretrain", "Output folder.", section="output")
    # a checkpoint path, or "auto" for OUT/checkpoint.pt
    resume: str | None = setting(
        None, "Continue from OUT/checkpoint.pt, or from the checkpoint given.", flag_value="auto", section="output"
    )
    force: bool = setting(
        False, "Start over in an --out that already holds a run (its checkpoint and log are removed).", section="output"
    )
    workers: int = setting(2, "Data loader worker processes.", section="speed", range=WORKERS_RANGE)
    quiet: bool = setting(False, "No progress bars on a terminal, no progress lines off one.", section="logging")
    # off a terminal (nohup, a cluster job) the loop prints one line per epoch on stderr; these add step lines
    log_every: int | None = log_every_setting()
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", section="speed")
    max_steps_per_epoch: int | None = setting(
        None, "Cap the optimiser steps of each epoch.", section="optimisation", range=STEPS_RANGE
    )
    # rows of one figure: more are unreadable, and each is restored at every figure
    figure_images: int = setting(8, "Images in each epoch's restoration figure.", section="output", range=(1, 64))
    figure_every: int = setting(
        1,
        "Draw the restoration figure (and monitor.png, and the logger's image) every "
        "this many epochs and at the last; 0: at the last epoch only.",
        section="output",
        range=EVERY_EPOCHS_RANGE,
    )
    eval_images: int = setting(
        256, "Held-out images for the restoration-error report.", section="logging", range=IMAGES_RANGE
    )
    eval_every: int | None = setting(
        None, "Also log the held-out error every this many steps.", section="logging", range=STEPS_RANGE
    )
    logger: str = setting(
        "jsonl",
        "Also log scalars, held-out error and figures to tensorboard (OUT/tensorboard) or "
        "wandb (offline unless WANDB_MODE=online); jsonl: log.jsonl alone (always written).",
        section="logging",
    )
    skip_nonfinite: bool = skip_nonfinite_setting()
    # about 1 % of the default run's time (docs/monitoring.md)
    monitor_every: int = setting(
        50,
        "Measure the representation every this many steps and at the end (RankMe, top "
        "component's share, online kNN where there are labels; monitor.png); 0: off.",
        section="logging",
        range=EVERY_STEPS_RANGE,
    )
    monitor_images: int = setting(
        256,
        "Held-out images (and as many training images for kNN) the monitor measures.",
        section="logging",
        range=IMAGES_RANGE,
    )
    keep_best: str | None = setting(
        None,
        "Also keep OUT/best.pt, the checkpoint with the best monitored metric.",
        choices=tuple(KEEP_BEST),
        section="output",
    )

    def __post_init__(self):
        check_field_types(self)
        apply_recipe(self)
        check_ranges(self)
        check_optimizer(self)
        check_amp(self)
        if self.compile is not None:  # torch's list of backends, loaded only when one is asked for
            from pretexts.engine.training.preflight import check_compile_backend

            check_compile_backend(self.compile)
        check_logger(self.logger)
        if self.keep_best is not None and not self.monitor_every:
            raise ParameterError(f"keep_best {self.keep_best} needs the monitor; give --monitor-every N (N > 0).")
        if self.keep_best not in (None, *KEEP_BEST):
            raise ParameterError(f"keep_best must be one of {', '.join(KEEP_BEST)}; got {self.keep_best!r}.")
        self.betas = tuple(self.betas)

    @property
    def peak_lr(self) -> float:
        """lr = base_lr x batch / 256, the linear scaling rule the paper follows from MAE."""
        return self.lr if self.lr is not None else self.base_lr * self.batch_size / 256

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "PretrainConfig":
        """A saved config (config.json, a checkpoint's): one written before recipes existed ran the paper's, one
        written before the method options moved into `method_args` holds them at the top level; other keys no
        longer known are dropped."""
        values = with_method_args({"recipe": "paper", **values})
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def method_param_names(method: str) -> tuple[str, ...]:
    """The names of the options `method` declares (its `method_params`); () for a method that is not installed,
    whose run then says so. Imports the method's module (and torch) on first use."""
    try:
        return tuple(METHODS.get(method).method_params)
    except UnknownNameError:
        return ()


def with_method_args(values: dict) -> dict:
    """`values` with the top-level keys that are no config field but an option of its method (the energy method's
    steps, alpha, ... in a config written before they moved; `--set steps=1`) moved into 'method_args', over
    what it held; a former field its method does not declare (an old MAE run's `alpha`) is dropped."""
    known = {f.name for f in fields(PretrainConfig)}
    loose = [k for k in values if k not in known]
    if not loose:
        return values
    declared = set(method_param_names(values.get("method", PretrainConfig.method)))
    moved = {k: values[k] for k in loose if k in declared}
    rest = {k: v for k, v in values.items() if k not in moved and (k in declared or k not in FORMER_FIELDS)}
    return {**rest, "method_args": {**(values.get("method_args") or {}), **moved}} if moved else rest


def check_ranges(cfg) -> None:
    """ParameterError naming the first number field (or item of a tuple field) outside the range its `setting`
    declares, and that range. None, and what is not a number (refused by the type checks), are skipped."""
    for f in fields(cfg):
        bounds, value = f.metadata.get("range"), getattr(cfg, f.name)
        for item in value if isinstance(value, (tuple, list)) and bounds else (value,):
            if bounds and isinstance(item, numbers.Real) and not isinstance(item, bool) and item not in bounds:
                raise ParameterError(f"{f.name} must be in {bounds.interval()}, got {item}.")


def check_optimizer(cfg) -> None:
    """The AdamW settings a config has beyond their declared ranges: min_lr <= the peak lr, betas two numbers."""
    if getattr(cfg, "min_lr", None) is not None:
        if cfg.min_lr > cfg.peak_lr:
            raise ParameterError(
                f"min_lr must be <= the peak lr {cfg.peak_lr:g} (--lr, or base lr x batch / 256), "
                f"got {cfg.min_lr:g}; lower --min-lr."
            )
    if hasattr(cfg, "betas"):
        betas = cfg.betas
        pair = list(betas) if isinstance(betas, (tuple, list)) else []
        if len(pair) != 2 or not all(
            isinstance(b, numbers.Real) and not isinstance(b, bool) and 0 <= b < 1 for b in pair
        ):
            shown = list(betas) if isinstance(betas, (tuple, list)) else betas
            raise ParameterError(f"betas must be two numbers in [0, 1) (AdamW's, e.g. 0.9 0.95), got {shown}.")


def check_finite(cfg) -> None:
    """No number field (nor a number in a tuple field) is NaN or infinite: such a setting trains to NaN
    weights or never ends, so it is refused before the run starts."""
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, float) and not math.isfinite(item):
                raise ParameterError(f"{f.name} must be a finite number, got {item}.")


def check_field_types(cfg) -> None:
    """Each field holds its declared type, so the Python API gets a ParameterError, not a TypeError
    deep in the loop. An int may stand for a float, a list for a tuple (JSON), a Path for a str. Every
    number is finite (`check_finite`)."""
    for f in fields(cfg):
        allowed = typing.get_args(f.type) or (f.type,)
        value = getattr(cfg, f.name)
        if not all(isinstance(t, type) for t in allowed) or isinstance(value, bool) and bool in allowed:
            continue
        if (
            float in allowed
            and isinstance(value, int)
            and not isinstance(value, bool)
            or tuple in allowed
            and isinstance(value, list)
        ):
            continue
        if str in allowed and isinstance(value, os.PathLike):
            setattr(cfg, f.name, os.fspath(value))
        elif not isinstance(value, allowed) or isinstance(value, bool):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
            raise ParameterError(f"{f.name} must be {names}, got {value!r}.")
    check_finite(cfg)
