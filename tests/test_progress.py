"""Progress bars: on for a terminal, off under --quiet and when the output is not a terminal."""
import io

from pretexts.engine.training.progress import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bars_show_on_a_terminal_only_and_never_under_quiet(monkeypatch):
    monkeypatch.setattr("sys.stderr", Terminal())
    with progress(3, "epoch 1/1") as bar:
        assert not bar.disable
        bar.update()
    with progress(3, "epoch 1/1", quiet=True) as bar:
        assert bar.disable
    with progress(3, "epoch 1/1", enabled=False) as bar:  # ranks other than 0
        assert bar.disable
    monkeypatch.setattr("sys.stderr", io.StringIO())  # a log file, a pipe
    with progress(3, "epoch 1/1") as bar:
        assert bar.disable
