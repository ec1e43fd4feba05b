"""What a NaN or infinite loss does: stop the run (the default) or skip the step (--skip-nonfinite)."""

import math
from pathlib import Path

import torch

from pretexts.errors import NonFiniteLossError


class NonFiniteGuard:
    """Raises NonFiniteLossError naming the step, before the optimiser step, so the weights and the
    last checkpoint stay good. With `skip`, the step is counted and skipped instead; `patience`
    skipped steps in a row still stop the run, since then the weights themselves have diverged. `checkpoint`
    names the file in `out` that keeps the last good state (pretraining and fine-tuning: checkpoint.pt).

    A non-finite value before any update (step 1, or every step since skipped) comes from the starting weights and
    the model's settings, not the lr: the error then names `initial_hint`, which a method may set to its own
    settings (the energy's scale, head init, alpha and steps)."""

    initial_hint = "check the model's settings and the starting weights"

    def __init__(self, skip: bool, out: Path, patience: int = 10, checkpoint: str = "checkpoint.pt"):
        self.skip, self.out, self.patience, self.checkpoint = skip, out, patience, checkpoint
        self.skipped = 0
        self.in_a_row = 0
        self.last_bad_step = None  # in_a_row counts steps, so a finite loss then an infinite norm is one bad step

    def should_skip(self, loss: float, step: int, what: str = "loss") -> bool:
        """False for a finite loss (or gradient norm, `what`); True to skip this step; raises to stop the run."""
        if math.isfinite(loss):
            return False
        if self.last_bad_step != step:
            self.in_a_row = self.in_a_row + 1 if self.last_bad_step == step - 1 else 1
            self.last_bad_step = step
        saved = last_good(self.out, self.checkpoint)
        stop = None  # the message when no update came yet: every step since the first was bad, not the lr's doing
        if self.in_a_row == step:
            stop = f"{what} is {loss} at step {step}, before any update, so the lr is not the cause; {saved}. "
            stop += f"{self.initial_hint[:1].upper()}{self.initial_hint[1:]}."
        hint = f"{saved}. Lower --lr or set --clip-grad"
        if not self.skip:
            raise NonFiniteLossError(stop or f"{what} is {loss} at step {step}; {hint}, or pass --skip-nonfinite.")
        self.skipped += 1
        if self.in_a_row >= self.patience:
            raise NonFiniteLossError(
                stop or f"{what} is {loss} at {self.in_a_row} steps in a row (up to step {step}); {hint}."
            )
        return True

    def overflowed(self, scale: float, step: int) -> None:
        """fp16's loss scaler skipped this step: its gradients held inf or NaN. Counted with the skipped steps;
        a few at the start are how the scaler finds its scale, but a scale below 1 means the gradients overflow
        float16 even unscaled, so no step will be taken again and the run stops."""
        self.skipped += 1
        if scale < 1:
            raise NonFiniteLossError(
                f"fp16: the gradients overflow float16 even unscaled (the loss scale fell to {scale:g} by step "
                f"{step}, {self.skipped} steps skipped); {last_good(self.out, self.checkpoint)}. Train in bf16 "
                "(--amp bf16) or full precision (--amp off)."
            )


def last_good(out: Path, checkpoint: str = "checkpoint.pt") -> str:
    return (
        f"the last good checkpoint is kept in {out}"
        if (Path(out) / checkpoint).exists()
        else "no checkpoint was written yet"
    )


def check_finite_weights(model: torch.nn.Module, step: int, out: Path, checkpoint: str = "checkpoint.pt") -> None:
    """Before a save: weights that became NaN or infinite while the loss still looked finite (a huge lr), or
    floating-point buffers that did (BatchNorm's running variance of a single value), stop the run instead of
    replacing the last good checkpoint."""
    weights = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    buffers = [name for name, b in model.named_buffers() if b.is_floating_point() and not torch.isfinite(b).all()]
    if weights:
        raise NonFiniteLossError(
            f"{len(weights)} weight tensors (first: {weights[0]}) are NaN or infinite at step {step}, so "
            f"they were not saved; {last_good(out, checkpoint)}. Lower --lr or set --clip-grad, "
            f"then --resume."
        )
    if buffers:  # the weights are fine: statistics of too few values per channel, not a diverging step
        raise NonFiniteLossError(
            f"{len(buffers)} buffers (first: {buffers[0]}) are NaN or infinite at step {step}, so they were not "
            f"saved; {last_good(out, checkpoint)}. BatchNorm statistics need 2 or more values per channel: "
            f"raise --batch-size (or --img-size)."
        )
