"""Experiment logging backends beside log.jsonl (always written: resume trims it): TensorBoard and W&B.

Both get the same things: each step's scalars (loss, lr, alpha, ...), the held-out restoration error,
and each epoch's restoration figure as an image.
"""

import importlib.util
import json
import os
from pathlib import Path

from pretexts.errors import ParameterError

LOGGERS = ("jsonl", "tensorboard", "wandb")
INSTALL = {"tensorboard": 'pip install "pretexts[tensorboard]"', "wandb": 'pip install "pretexts[wandb]"'}


def check_logger(name: str) -> None:
    """The backend exists and its package is installed: checked when the config is made, not an epoch later."""
    if name not in LOGGERS:
        raise ParameterError(f"logger must be one of {', '.join(LOGGERS)}; got {name!r}.")
    if name != "jsonl" and importlib.util.find_spec(name) is None:
        raise ParameterError(f"--logger {name} needs the {name} package; install it with {INSTALL[name]}.")


def log_line(row: dict) -> str:
    """One line of log.jsonl, strict JSON as jq and JSON.parse read it: a non-finite number (a skipped step's NaN
    loss, an inf gradient norm) is written as null, which json's bare NaN token is not."""
    # imported here: the config imports this module (for `check_logger`) and stays light
    from pretexts.engine.training.file_writes import finite_or_null

    return json.dumps(finite_or_null(row), allow_nan=False) + "\n"


def flat_scalars(stats: dict, prefix: str = "") -> dict[str, float]:
    """{'loss': .., 'held_out': {'corrupted_mse': .., 'restored_mse': [a, b]}} -> 'held_out/restored_mse_step2': b."""
    scalars = {}
    for key, value in stats.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            scalars.update(flat_scalars(value, f"{name}/"))
        elif isinstance(value, (list, tuple)):
            scalars.update({f"{name}_step{i}": float(v) for i, v in enumerate(value, 1) if isinstance(v, (int, float))})
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            scalars[name] = float(value)
    return scalars


class TensorBoardLog:
    """Event files in OUT/tensorboard; a resumed run purges the events logged after its checkpoint."""

    def __init__(self, out: Path, config: dict, resumed_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(out) / "tensorboard"), purge_step=resumed_step)
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in config.items()), 0)

    def scalars(self, stats: dict, step: int) -> None:
        for name, value in flat_scalars(stats).items():
            self.writer.add_scalar(name, value, step)

    def image(self, tag: str, path: Path, step: int) -> None:
        import numpy as np  # here: the config (and the CLI) import this module for `check_logger`
        from PIL import Image

        self.writer.add_image(tag, np.asarray(Image.open(path).convert("RGB")), step, dataformats="HWC")

    def close(self) -> None:
        self.writer.close()


class WandbLog:
    """A W&B run (offline unless WANDB_MODE says otherwise and you are logged in), resumed by id on --resume."""

    def __init__(self, out: Path, config: dict, resumed_step: int | None):
        import wandb

        from pretexts.engine.training.file_writes import write_text  # by rename: never through a link in OUT

        self.wandb = wandb
        run_id = Path(out) / "wandb_run_id"
        previous = run_id.read_text().strip() if resumed_step is not None and run_id.is_file() else None
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "pretexts"),
            dir=str(out),
            config=config,
            mode=os.environ.get("WANDB_MODE", "offline"),
            id=previous,
            resume="allow" if previous else None,
        )
        write_text(run_id, self.run.id)

    def scalars(self, stats: dict, step: int) -> None:
        self.run.log(flat_scalars(stats), step=step)

    def image(self, tag: str, path: Path, step: int) -> None:
        self.run.log({tag: self.wandb.Image(str(path))}, step=step)

    def close(self) -> None:
        self.run.finish()


class NoLog:
    """jsonl alone, and every rank but 0."""

    def __init__(self, *args):
        pass

    def scalars(self, stats: dict, step: int) -> None:
        pass

    def image(self, tag: str, path: Path, step: int) -> None:
        pass

    def close(self) -> None:
        pass


def open_experiment_log(name: str, out: Path, config: dict, resumed_step: int | None = None):
    """The backend `name` (jsonl alone needs none: log.jsonl is written by the loop itself)."""
    check_logger(name)
    return {"jsonl": NoLog, "tensorboard": TensorBoardLog, "wandb": WandbLog}[name](out, config, resumed_step)
