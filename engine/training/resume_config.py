"""`--resume` keeps the run's own settings: the checkpoint's config is the base, options given on the command line
may change only what does not change the run (epochs, logging, figures, speed), and config.json stays true.
`Config.resuming(out, **changes)` builds the same config in Python."""

import dataclasses
import os
from pathlib import Path

from pretexts.engine.data.shard_sets import is_stream
from pretexts.engine.training.config_record import left_open
from pretexts.engine.training.run_folder import same_path
from pretexts.engine.training.settings import from_values
from pretexts.errors import CheckpointError, ParameterError

# what a resumed run may change; everything else must equal the checkpoint's (a method's own arguments that
# may change, such as the energy method's grad_mode, it names itself: `Method.resume_may_change`)
# every training command: where and how the run computes and reports, not what it computes
RUN_MAY_CHANGE = frozenset(
    {"epochs", "out", "resume", "force", "workers", "quiet", "device", "accum_iter", "skip_nonfinite"}
    | {"tf32", "cudnn_benchmark"}  # the arithmetic: a resume on other arithmetic is told so (arithmetic.py)
)
FINETUNE_MAY_CHANGE = RUN_MAY_CHANGE | {"log_every"}
SEGMENT_MAY_CHANGE = FINETUNE_MAY_CHANGE | {"max_steps"}  # a longer run re-plans its schedule, as --epochs
PRETRAIN_MAY_CHANGE = RUN_MAY_CHANGE | {
    "figure_images",
    "eval_images",
    "eval_every",
    "logger",
    "grad_checkpointing",
    "channels_last",
    "compile",
    "monitor_every",
    "monitor_images",
    "keep_best",
    "log_every",
    "figure_every",
    "save_every",
}

PATH_FIELDS = ("checkpoint", "data")  # compared as the file they name, however spelt
OPTION_NAMES = {"task_args": "--task-arg and --preset", "method_args": "--method-arg"}


def checkpoint_path(values: dict, cls, file: str = "checkpoint.pt") -> Path:
    """The checkpoint a --resume names: OUT/`file` for a bare --resume."""
    out = values.get("out") or next(f.default for f in dataclasses.fields(cls) if f.name == "out")
    return Path(out) / file if values["resume"] == "auto" else Path(values["resume"])


def resumed_values(cls, values: dict, kind: str | None, may_change: frozenset, file: str = "checkpoint.pt") -> dict:
    """The options of a --resume run (`values`: what the command line and --config gave) laid over the
    checkpoint's saved config. A checkpoint that is missing or of another kind is left to the run's own load,
    which says what is wrong."""
    from pretexts.engine.training.checkpoint import load_checkpoint

    path = checkpoint_path(values, cls, file)
    if not path.is_file():
        return values
    ckpt = load_checkpoint(path)
    if ckpt.get("kind") != kind or not isinstance(ckpt.get("config"), dict):
        return values
    try:  # a change that would change the run is refused before the run says what it starts
        refuse_given_changes(cls, ckpt["config"], values, may_change, path)
    except ParameterError:
        pass  # the run's own build says what is wrong with a value
    return laid_over(cls, ckpt["config"], values)


def refuse_given_changes(cls, saved: dict, values: dict, may_change: frozenset, path) -> None:
    """Refuse in one line a setting `values` give that differs from the checkpoint's `saved` config and would change
    the run. What is left open (auto, None) is compared once the run has resolved it as the checkpoint records, and
    the task and method arguments once the task and the method read them."""
    settled = {k: v for k, v in values.items() if not left_open(v)}
    check_resumable(saved, cls(**laid_over(cls, saved, settled)), may_change, path, same=lambda *_: True)


def laid_over(cls, saved: dict, values: dict) -> dict:
    """A checkpoint's `saved` config with `values` laid over it, a mapping (task arguments) key by key."""
    known = {f.name for f in dataclasses.fields(cls)}
    saved = cls.from_dict(saved).to_dict() if hasattr(cls, "from_dict") else saved
    merged = {k: v for k, v in saved.items() if k in known and k not in ("out", "resume", "force")}
    for key, value in values.items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) and key in merged else value
    return merged


def resuming_config(cls, out, changes: dict, kind: str, may_change: frozenset, file: str = "checkpoint.pt"):
    """`cls.resuming(out, **changes)`: the config that continues the run in `out`, built as `--resume` builds it
    (OUT/`file`'s saved settings with `changes` over them). A change that would change the run is refused now, in
    one line; task and method arguments are compared when the run starts, as the task and the method read them."""
    from pretexts.engine.training.checkpoint import load_checkpoint

    if changes.get("force"):
        raise ParameterError(
            f"{cls.__name__}.resuming continues the run in out and force=True starts it over: give one of them."
        )
    values = {"out": str(out), "resume": "auto", **changes}
    path = checkpoint_path(values, cls, file)
    if not path.is_file():
        raise CheckpointError(
            f"{cls.__name__}.resuming: there is no checkpoint '{path}' to continue; start the run with "
            f"{cls.__name__}(out={str(out)!r}, ...), or give resume= the path of its checkpoint."
        )
    ckpt = load_checkpoint(path, kinds=(kind,))
    cfg = from_values(cls, laid_over(cls, ckpt["config"], values), f"{cls.__name__}.resuming")
    refuse_given_changes(cls, ckpt["config"], values, may_change, path)
    return cfg


def check_resumable(saved: dict, cfg, may_change: frozenset, path, same=None) -> None:
    """One line naming the first setting that differs from the checkpoint's and would change the run.
    `same(name, saved_value, value)` compares fields that need more than == (task arguments as the task reads
    them)."""
    saved_cfg = type(cfg).from_dict(saved) if hasattr(type(cfg), "from_dict") else type(cfg)(**saved)
    if is_stream(getattr(cfg, "data", None) or ""):
        # shards are dealt to ranks x workers readers: other workers read the samples in another order
        may_change = may_change - {"workers"}
    # the arguments last: what a method resolves (loss=auto) follows from the backbone and task, which say why
    for f in sorted(dataclasses.fields(cfg), key=lambda f: f.name in OPTION_NAMES):
        if f.name in may_change:
            continue
        before, now = getattr(saved_cfg, f.name), getattr(cfg, f.name)
        equal = same(f.name, before, now) if same and f.name in ("task_args", "method_args") else before == now
        equal = equal or f.name in PATH_FIELDS and same_file(before, now)
        if not equal:
            name, option = f.name, OPTION_NAMES.get(f.name, "--" + f.name.replace("_", "-"))
            if f.name == "method_args":  # name the method's argument (the energy method's alpha), each its option
                key = next((k for k in {**before, **now} if str(before.get(k)) != str(now.get(k))), None)
                if key is not None and key not in before:  # an argument the method gained since the checkpoint
                    raise CheckpointError(
                        f"checkpoint '{path}' records no {key}, an argument this build of pretexts resolves "
                        f"({key}={now.get(key)!r}), so an earlier build wrote it and its run cannot continue here; "
                        f"start a new run (another --out, or --force over this one)."
                    )
                if key is not None:
                    name, before, now = key, before.get(key), now.get(key)
                    option = f"--{key.replace('_', '-')} (--method-arg {key}=...)"
            python = f"method_args[{name!r}]" if f.name == "method_args" and name != f.name else f.name
            raise CheckpointError(
                f"checkpoint '{path}' was trained {trained_with(name, before)}, this run asks for {now!r}; a resumed "
                f"run keeps its {option} (leave it out to keep the saved one; in Python, leave {python} out of "
                f"{type(cfg).__name__}.resuming(out, ...)), or start a new run with --out."
            )


def same_file(before, now) -> bool:
    """Two spellings of one file or folder on disk (relative and absolute, a symlink and its target). A saved path
    that is relative was relative to a folder not recorded: it matches only its own spelling, made absolute here
    as the run now records it."""
    if not (isinstance(before, str) and isinstance(now, str)):
        return False
    if not Path(before).is_absolute():
        return os.path.abspath(os.path.expanduser(before)) == now
    return Path(before).exists() and same_path(before, now)


def trained_with(name: str, value) -> str:
    """How a refusal names the saved value; None is a setting the run left to be derived (lr from base_lr, the
    classes from the data), not a value it trained with."""
    return f"with {name}={value!r}" if value is not None else f"without {name} (the run derived it)"


def recorded_setting(cfg, name: str, file: str = "checkpoint.pt"):
    """The value of `name` in the config of the checkpoint `cfg.resume` names; None when there is no resume or no
    such checkpoint (the run's own load says what is wrong). What `auto` chose as a run started is kept this way:
    a resume that plans the run longer continues the run rather than choosing again."""
    from pretexts.engine.training.checkpoint import load_checkpoint

    if not cfg.resume:
        return None
    path = checkpoint_path(dataclasses.asdict(cfg), type(cfg), file)
    return load_checkpoint(path)["config"].get(name) if path.is_file() else None
