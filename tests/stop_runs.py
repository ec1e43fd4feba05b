"""Stopping a run in-process as a scheduler's SIGTERM would, at a chosen optimiser step, for the resume tests."""

import os
import signal


def sigterm_at_step(run, step: int, loss: str = "criterion") -> None:
    """Wrap `run`'s loss (the attribute `loss`, called once a micro-batch) so that it sends this process SIGTERM at
    global step `step`, and the run stops as a signalled one does."""
    compute = getattr(run, loss)

    def signalled(*args, **kwargs):
        if run.global_step == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return compute(*args, **kwargs)

    setattr(run, loss, signalled)
