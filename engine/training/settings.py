"""How a command's config fields are declared and checked, shared by every config dataclass (PretrainConfig,
FinetuneConfig, ProbeConfig, SegmentConfig, CompareConfig): `setting` (a field with its --help text, section and
allowed `Range`), the --help `SECTIONS`, the ranges and options the commands share, and the checks every config runs
(types, finiteness, ranges, the optimiser's and --amp's values). Torch-free: `pretexts --help` builds its options
from these."""

import math
import numbers
import os
import typing
from dataclasses import dataclass, field, fields

from pretexts.engine.training.config_record import DERIVED, RECIPE_APPLIED
from pretexts.errors import ParameterError, suggest

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


# `--global-pool`: what the pooled features are (timm's global_pool); None keeps the backbone's own
POOLS = ("avg", "token")
# --compile: auto (the default) resolves per run (engine/training/compile_choice.py); these mean eager
COMPILE_AUTO, COMPILE_OFF = "auto", ("off", "none")

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


def tf32_setting():
    """`--tf32/--no-tf32`, shared by every training command."""
    return setting(
        True,
        "On CUDA: float32 matmuls and convolutions in TF32 (Ampere and later), as timm's and MAE's scripts run; "
        "--no-tf32: full float32. Recorded in results.json's arithmetic.",
        section="speed",
    )


def cudnn_benchmark_setting():
    """`--cudnn-benchmark/--no-cudnn-benchmark`, shared by every training command."""
    return setting(
        True,
        "On CUDA: cuDNN times each convolution's kernels once and keeps the fastest for the run's fixed shapes; "
        "--no-cudnn-benchmark: its default kernels.",
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


def log_every_setting():
    """The `--log-every` option every training command shares (off a terminal, one line per epoch anyway)."""
    return setting(
        None,
        "Off a terminal, also print a progress line every this many optimiser steps (loss, lr, img/s, ETA).",
        section="logging",
        range=STEPS_RANGE,
    )


def save_every_setting(what: str):
    """`--save-every`, shared by `train` and `compare`: a run killed with no signal first (a lost node, an OOM kill)
    loses the steps since its last checkpoint, written at each epoch's end otherwise."""
    return setting(
        None,
        f"Also write {what} every this many optimiser steps (it is written at each epoch's end anyway), so that a "
        "run killed without warning loses at most that many.",
        section="output",
        range=STEPS_RANGE,
    )


def max_images_setting():
    """`--max-images`: what a command that needs whole splits (probes, fine-tuning's val) reads of streamed shards."""
    return setting(
        10_000,
        "Shards only: at most this many images of each split read whole (the first in shard order; the output "
        "says so). Folders are read whole.",
        section="data",
        range=Range(1, 100_000_000),
    )


# a ViT's patch positions at random init: backbones/vit_tokens.POSITIONS, named here so settings need no torch
POSITIONS = ("auto", "learned", "sincos")


def positions_setting():
    """`--positions` of finetune and probe --from-scratch: a ViT's patch positions at random init."""
    return setting(
        "auto",
        "With --from-scratch: a ViT's patch positions. auto: the fixed 2D sin-cos table on a ViT with absolute "
        "positions (where `pretexts train` starts it by default, so the baseline measures what pretraining adds "
        "beyond the table), timm's elsewhere; sincos; learned (timm's random ones). Fine-tuning trains them on.",
        section="model",
        choices=POSITIONS,
    )


def check_positions(cfg) -> None:
    """`--positions`: one of its choices, and only with --from-scratch (weights that are loaded bring theirs)."""
    if cfg.positions not in POSITIONS:
        raise ParameterError(f"--positions must be auto, learned or sincos; got {cfg.positions!r}.")
    if cfg.positions != "auto" and not cfg.from_scratch:
        raise ParameterError(
            f"--positions {cfg.positions} sets a backbone's positions at random init: it goes with --from-scratch "
            f"(loaded weights bring their own positions); leave it out."
        )


def check_global_pool(cfg) -> None:
    if cfg.global_pool not in (None, *POOLS):
        raise ParameterError(f"global_pool must be one of {', '.join(POOLS)} (or unset); got {cfg.global_pool!r}.")


def check_amp(cfg) -> None:
    if cfg.amp not in ("auto", "bf16", "fp16", "off"):
        raise ParameterError(f"amp must be one of auto, bf16, fp16, off; got {cfg.amp!r}.")


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


# how a config file or --set writes the types that a bare value cannot stand for
WRITTEN_AS = {tuple: " (write a list: {}=[a, b])", dict: " (write a mapping: {}={{key: value}})"}


def check_field_types(cfg) -> None:
    """Each field holds its declared type, so the Python API gets a ParameterError, not a TypeError
    deep in the loop. An int may stand for a float, a list for a tuple (JSON), a Path for a str. A mapping's keys
    are names. Every number is finite (`check_finite`)."""
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
            raise ParameterError(
                f"{f.name} must be {names}, got {value!r}{WRITTEN_AS.get(allowed[0], '').format(f.name)}."
            )
        keys = [key for key in value if not isinstance(key, str)] if isinstance(value, dict) else []
        if keys:  # a YAML key such as 1 or null; `**args` would fail with a bare TypeError
            raise ParameterError(
                f"{f.name} keys must be parameter names, got {keys[0]!r}; name each parameter "
                f"({f.name}={{name: value}})."
            )
    check_finite(cfg)


def from_values(cls, values: dict, where: str = "saved config"):
    """`cls(**values)`, with a key that is no field of `cls` refused in one line naming the close fields (a
    results.json given for a config.json, a misspelt key), not a TypeError. A config.json's record of its derived
    fields is no field: the values stand as the run used them (`--config` derives them again instead)."""
    values = {k: v for k, v in values.items() if k != DERIVED}
    known = [f.name for f in fields(cls)]
    unknown = [key for key in values if key not in known]
    if unknown:
        raise ParameterError(
            f"{where}: unknown field '{unknown[0]}' for {cls.__name__}.{suggest(unknown[0], known)} "
            f"Fields: {', '.join(known)}."
        )
    return cls(**values)


def expect_config(cfg, cls) -> None:
    """A command's entry point given another object (a dict, another command's config) says what it takes; a
    config whose fields were set after it was built (`cfg.batch_size = 0`) is checked again, and one whose recipe
    (or a field that chose the recipe's values: a fine-tune's `linear_probe`) was changed so is refused: the old
    recipe's values would stay, looking given."""
    if not isinstance(cfg, cls):
        raise ParameterError(
            f"expected a {cls.__name__}, got a {type(cfg).__name__}: build one with {cls.__name__}(field=value, ...)"
            + (f" or {cls.__name__}.from_dict(values)." if hasattr(cls, "from_dict") else ".")
        )
    check_field_types(cfg)
    check_ranges(cfg)
    applied = vars(cfg).get(RECIPE_APPLIED)
    # the recipe's name (a pretraining config), or each field that chose the values with its value then
    chosen = {"recipe": applied} if isinstance(applied, str) else applied or {}
    for name, was in chosen.items():
        now = getattr(cfg, name)
        if now != was:
            raise ParameterError(
                f"{name} was set to {now!r} after the config was built with {name} {was!r}, whose recipe values "
                f"(base_lr, weight_decay, ...) it still holds; build a new {cls.__name__}({name}={now!r}, ...) "
                f"instead."
            )
