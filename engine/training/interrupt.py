"""Graceful stop: SIGTERM or Ctrl-C asks the training loop to save a checkpoint and exit.

The handler only sets a flag; the loop checks it between optimiser steps and saves from there
(saving inside a signal handler could interrupt a half-written checkpoint or optimiser step).
A second Ctrl-C raises KeyboardInterrupt at once, for a loop that hangs.

Stops nest: a run inside another (each cell of `pretexts compare` trains and fine-tunes under compare's own
`StopSignals`) hands the signal it caught to the enclosing one as it exits, so a signal the inner run caught too
late to act on (during its last step or its last epoch's saves, after which it ends normally) still stops the
outer one at its next check. With nothing enclosing, such a late signal is dropped: the run finished, its files are
whole, and it exits 0.
"""

import signal
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """`with StopSignals() as stop:` ... `if stop.requested: save and leave`; the previous handlers
    come back on exit. Outside the main thread (where Python allows no handlers) it never triggers."""

    def __init__(self):
        self.signal: signal.Signals | None = None
        self._previous: dict = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (130, 143)."""
        return 128 + int(self.signal) if self.signal is not None else 0

    def _handle(self, signum, frame) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C
        self.signal = signal.Signals(signum)

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        enclosing = getattr(self._previous.get(self.signal), "__self__", None)
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self._previous = {}
        if isinstance(enclosing, StopSignals) and enclosing is not self and enclosing.signal is None:
            enclosing.signal = self.signal  # it would have caught it itself, had this one not been installed
