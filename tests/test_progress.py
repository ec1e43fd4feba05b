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


def test_lines_print_off_a_terminal_only_and_never_under_quiet(monkeypatch):
    from pretexts.engine.training.progress import ProgressLines

    def printed(**kwargs) -> list[str]:
        written = []
        lines = ProgressLines(2, 4, every=1, write=written.append, **kwargs)
        for step in (1, 2):
            lines.step(0.5 * step, 8)
            if lines.step_due(step) and step < 2:
                lines.step_line(1, step, 1e-3, {"alpha": 0.1})
        lines.epoch_line(1, 2, 1e-3, {"alpha": 0.1}, "held-out 0.5x corrupted")
        return written

    monkeypatch.setattr("sys.stderr", io.StringIO())  # a log file, a pipe
    step, epoch = printed()
    assert step.startswith("epoch 1/2  step 1/4  loss 0.5  lr 1.00e-03  alpha 0.1  ") and " img/s  eta " in step
    assert epoch.startswith("epoch 1/2  step 2/4  loss 1  ") and epoch.endswith("  held-out 0.5x corrupted")
    assert printed(quiet=True) == [] and printed(enabled=False) == []
    monkeypatch.setattr("sys.stderr", Terminal())  # the bars show there instead
    assert printed() == []
    assert [line.split("  ")[1] for line in printed(on_terminal=True)] == ["step 2/4"]  # finetune's, segment's


def test_loss_is_the_mean_since_the_last_line_without_skipped_steps(monkeypatch):
    from pretexts.engine.training.progress import ProgressLines

    monkeypatch.setattr("sys.stderr", io.StringIO())
    written = []
    lines = ProgressLines(1, 4, write=written.append)
    for loss in (1.0, float("nan"), 3.0):
        lines.step(loss, 8)
    lines.epoch_line(1, 3, None)
    lines.step(10.0, 8)
    lines.epoch_line(1, 4, None)
    assert [line.split("  ")[2] for line in written] == ["loss 2", "loss 10"]
