"""What pretraining's checkpoints hold beyond every run's epoch state (`TrainingRun.epoch_state`), and the checks
that a checkpoint continues this run: its task's scaled parameters as they resolve now, and its task and method
arguments as the task and the method read them."""

import dataclasses
from pathlib import Path

import pretexts
from pretexts.engine.training.checkpoint import FORMAT_VERSION
from pretexts.errors import CheckpointError


def pretrain_entries(cfg, batch: int, monitor_state: dict | None) -> dict:
    """The format and package versions, the next batch of the epoch (a stop part-way through saves it), the
    monitor's state and the task's scaled parameters."""
    return {
        "format_version": FORMAT_VERSION,
        "pretexts_version": pretexts.__version__,
        "batch": batch,
        "monitor": monitor_state,
        "task_sizes": task_sizes(cfg),
    }


def task_sizes(cfg) -> dict:
    """The task's scaled parameters as they resolve at the run's image size (`Pretext.sizes`)."""
    return pretexts.create_pretext(cfg.task, **cfg.task_args).sizes(cfg.img_size)


def check_task_sizes(cfg, ckpt: dict, path: Path) -> None:
    """A checkpoint's scaled task parameters must resolve as they did when it was written."""
    saved, now = ckpt.get("task_sizes"), task_sizes(cfg)
    if saved is not None and saved != now:
        raise CheckpointError(
            f"checkpoint '{path}' was trained with the task's scaled parameters {saved}; "
            f"this version resolves them to {now} at {cfg.img_size} px, so it cannot "
            f"continue the run as it was: resume it with the pretexts version that wrote it "
            f"({ckpt.get('pretexts_version') or 'unknown'}), or start a new run with --out."
        )


def same_arguments(cfg, task, method):
    """`same(name, saved, asked)` for check_resumable: task and method arguments compared as the task and the
    method read them ('4' equals 4); those the method lets a resumed run change (`Method.resume_may_change`) are
    not compared."""

    def same(name: str, saved: dict, asked: dict) -> bool:
        if name == "task_args":
            return pretexts.create_pretext(cfg.task, **saved).values() == task.values()
        kind = type(method)
        before = kind.parse_args(dataclasses.replace(cfg, method_args=saved))
        return all(before[k] == v for k, v in method.args.items() if k not in kind.resume_may_change)

    return same
