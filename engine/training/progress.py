"""Progress for every long loop. On a terminal, tqdm bars (train, finetune, probe), off under --quiet and, by
tqdm's own check, when stderr is not a terminal. There, under nohup or a cluster scheduler, `ProgressLines`
prints plain lines instead: one per epoch (and every `--log-every` steps), flushed, on stderr."""

import math
import sys
import time
from collections.abc import Callable

from tqdm.auto import tqdm


def progress(total: int, desc: str, quiet: bool = False, initial: int = 0, enabled: bool = True) -> tqdm:
    return tqdm(
        total=total,
        initial=initial,
        desc=desc,
        disable=True if quiet or not enabled else None,
        dynamic_ncols=True,
        leave=False,
    )


def stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # flushed: `tail -f` and a scheduler's log file see it at once


def stderr_is_terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def duration(seconds: float) -> str:
    """'1:02:03' (tqdm's style); '?' before anything is known."""
    if not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class ProgressLines:
    """The progress lines of one run of `epochs` epochs and `total_steps` optimiser steps, `start_step` of them done
    before it started (a resumed run; `begin` sets it again):

        epoch 2/3  step 10/15  loss 0.03083  lr 2.50e-04  alpha 0.06062  3 img/s  eta 0:02:15  held-out 1.00x corrupted

    `loss` is the mean of the steps since the previous line (non-finite, skipped steps left out), `img/s` their
    images over their loading and stepping time (the caller restarts the clock with `restart_clock` after its
    evaluations), `eta` the remaining steps at the run's pace so far (evaluations included). The caller adds the
    method's step scalars and what it measured (the held-out ratio, top-1, mIoU).

    Epoch lines print when stderr is not a terminal (with `on_terminal`, there too: fine-tuning and segmentation
    always printed one per epoch), step lines (`every` N steps) only when it is not; nothing under `quiet` or
    where `enabled` is False (ranks other than 0)."""

    def __init__(
        self,
        epochs: int,
        total_steps: int,
        start_step: int = 0,
        quiet: bool = False,
        enabled: bool = True,
        every: int | None = None,
        on_terminal: bool = False,
        write: Callable[[str], None] = stderr_line,
    ):
        terminal = stderr_is_terminal()
        self.epoch_lines = enabled and not quiet and (on_terminal or not terminal)
        self.every = every if enabled and not quiet and not terminal else None
        self.epochs, self.total_steps, self.start_step, self.write = epochs, total_steps, start_step, write
        self.started = self.clock = time.perf_counter()
        self.losses, self.images, self.seconds = [], 0, 0.0

    def begin(self, start_step: int) -> None:
        """The run (re)starts at `start_step` (a resumed run's): the ETA's pace counts from here."""
        self.start_step = start_step
        self.started = self.clock = time.perf_counter()

    def restart_clock(self) -> None:
        self.clock = time.perf_counter()

    def step(self, loss: float, images: int) -> None:
        now = time.perf_counter()
        self.seconds += now - self.clock
        self.clock = now
        self.images += images
        if math.isfinite(loss):
            self.losses.append(loss)

    def step_due(self, step: int) -> bool:
        return bool(self.every) and step % self.every == 0

    def format(self, epoch: int, step: int, lr: float | None, stats: dict | None = None, result: str = "") -> str:
        """The line for `step` in `epoch` (1-based); starts the next interval."""
        loss = sum(self.losses) / len(self.losses) if self.losses else math.nan
        fields = [f"epoch {epoch}/{self.epochs}", f"step {step}/{self.total_steps}", f"loss {loss:.4g}"]
        if lr is not None:
            fields.append(f"lr {lr:.2e}")
        fields += [f"{name} {value:.4g}" for name, value in (stats or {}).items()]
        rate = self.images / self.seconds if self.seconds > 0 else math.nan
        done = step - self.start_step
        pace = (time.perf_counter() - self.started) / done if done > 0 else math.nan
        fields += [
            f"{rate:.0f} img/s" if math.isfinite(rate) else "? img/s",
            f"eta {duration(pace * (self.total_steps - step))}",
        ]
        if result:
            fields.append(result)
        self.losses, self.images, self.seconds = [], 0, 0.0
        return "  ".join(fields)

    def epoch_line(self, epoch: int, step: int, lr: float | None, stats: dict | None = None, result: str = "") -> None:
        line = self.format(epoch, step, lr, stats, result)
        if self.epoch_lines:
            self.write(line)

    def step_line(self, epoch: int, step: int, lr: float | None, stats: dict | None = None) -> None:
        line = self.format(epoch, step, lr, stats)
        if self.every:
            self.write(line)


def held_out_ratio(held) -> str:
    """'held-out 0.68x corrupted': a `HeldOut`'s last output's error over its baseline's (engine/methods/report.py)."""
    ratio = held.ratio() if held.restored_mse else None
    return "" if ratio is None else f"held-out {ratio:.2f}x {held.baseline}"
