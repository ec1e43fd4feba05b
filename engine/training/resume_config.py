"""`--resume` keeps the run's own settings: the checkpoint's config is the base, options given on the command line
may change only what does not change the run (epochs, logging, figures, speed), and config.json stays true."""

import dataclasses
from pathlib import Path

from pretexts.engine.data.shard_sets import is_stream
from pretexts.errors import CheckpointError

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
    known = {f.name for f in dataclasses.fields(cls)}
    saved = cls.from_dict(ckpt["config"]).to_dict() if hasattr(cls, "from_dict") else ckpt["config"]
    merged = {k: v for k, v in saved.items() if k in known and k not in ("out", "resume", "force")}
    for key, value in values.items():
        merged[key] = {**merged.get(key, {}), **value} if isinstance(value, dict) and key in merged else value
    return merged


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
        if not equal:
            name, option = f.name, OPTION_NAMES.get(f.name, "--" + f.name.replace("_", "-"))
            if f.name == "method_args":  # name the method's argument (the energy method's alpha), each its option
                key = next((k for k in {**before, **now} if str(before.get(k)) != str(now.get(k))), None)
                if key is not None:
                    name, before, now = key, before.get(key), now.get(key)
                    option = f"--{key.replace('_', '-')} (--method-arg {key}=...)"
            raise CheckpointError(
                f"checkpoint '{path}' was trained with {name}={before!r}, this run asks for "
                f"{now!r}; a resumed run keeps its {option} (leave it out to keep the saved one), "
                f"or start a new run with --out."
            )


def recorded_setting(cfg, name: str, file: str = "checkpoint.pt"):
    """The value of `name` in the config of the checkpoint `cfg.resume` names; None when there is no resume or no
    such checkpoint (the run's own load says what is wrong). What `auto` chose as a run started is kept this way:
    a resume that plans the run longer continues the run rather than choosing again."""
    from pretexts.engine.training.checkpoint import load_checkpoint

    if not cfg.resume:
        return None
    path = checkpoint_path(dataclasses.asdict(cfg), type(cfg), file)
    return load_checkpoint(path)["config"].get(name) if path.is_file() else None
