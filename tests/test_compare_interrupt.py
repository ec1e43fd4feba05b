"""`pretexts compare` stops like `train`: SIGTERM or Ctrl-C in any phase of a cell (pretraining, scoring,
fine-tuning) saves what the phase has, prints one line saying to run the same command again, and exits with the
signal's code; the rerun continues the cell to the numbers an uninterrupted comparison gives."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import click
import pytest
from cli_runs import one_torch_thread, run_cli, start_pretexts, tiny_image_folder  # noqa: F401 (a fixture)

from pretexts.engine.compare import cells as compare_cells
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.compare.run import OUTPUTS
from pretexts.engine.compare.run import compare as compare_api
from pretexts.engine.evaluation.finetune import Finetuner

ROOT = Path(__file__).resolve().parents[1]
CELL = Path("cells") / "test_convnext" / "energy__random-mask" / "seed0"
STEPS, FINETUNE_EPOCHS = 16, 4  # the stop lands mid-phase: step 7 of 16, then after fine-tune epoch 1 of 4


def compare_args(data: Path, out: Path, steps: int, finetune_epochs: int) -> list[str]:
    return [
        *("compare", "--backbone", "test_convnext", "--batch-size", "8", "--threads", "1", "--workers", "0"),
        *("--tasks", "random-mask", "--methods", "energy", "--seeds", "0", "--steps", str(steps)),
        *("--finetune-epochs", str(finetune_epochs), "--device", "cpu", "--data", str(data), "--out", str(out)),
    ]


def compare(args: list[str]) -> subprocess.Popen:
    return start_pretexts(args, threads=1)


def stop_when(process: subprocess.Popen, ready, sig: signal.Signals) -> str:
    """Send `sig` once `ready()` holds; the process's stderr after it ended."""
    end = time.time() + 300
    try:
        while not ready():
            if process.poll() is not None or time.time() > end:
                pytest.fail("the comparison ended, or ran 300 s, before the signal")
            time.sleep(0.02)
        os.killpg(process.pid, sig) if sig == signal.SIGINT else process.send_signal(sig)
        _, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 128 + sig, err
    return err


def finish(args: list[str]) -> dict:
    process = compare(args)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return json.loads((Path(args[-1]) / CELL / "cell.json").read_text())


def lines_in(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tiny_image_folder(tmp_path_factory.mktemp("data"))


def stopped_once(args: list[str], phase: str, sig: signal.Signals, ready) -> None:
    err = stop_when(compare(args), ready, sig)
    last = err.strip().splitlines()[-1]  # after any warning the run printed on its way
    assert last.startswith(f"stopped by {sig.name} while {phase}") and "Run the same command again" in last, err
    assert "Traceback" not in err, err


@pytest.mark.slow
def test_a_stopped_cell_says_how_to_continue_and_the_reruns_equal_an_uninterrupted_one(tmp_path, data):
    """SIGTERM part-way through the pretraining (after its first epoch's checkpoint: 4 steps of 32 images), then
    Ctrl-C after the first fine-tuning epoch; each rerun continues where the last stopped."""
    stopped, straight = tmp_path / "stopped", tmp_path / "straight"
    args = compare_args(data, stopped, steps=STEPS, finetune_epochs=FINETUNE_EPOCHS)
    cell = stopped / CELL
    stopped_once(args, "pretraining", signal.SIGTERM, lambda: lines_in(cell / "run" / "log.jsonl") >= 6)
    tune = cell / f"m{STEPS}" / "finetune"
    stopped_once(args, "fine-tuning", signal.SIGINT, lambda: (tune / "checkpoint.pt").is_file())
    resumed = finish(args)
    expected = finish(compare_args(data, straight, steps=STEPS, finetune_epochs=FINETUNE_EPOCHS))
    keys = ("steps", "knn", "knn_std", "linear", "held_out_ratio")
    at = str(STEPS)
    assert {k: resumed["points"][at][k] for k in keys} == {k: expected["points"][at][k] for k in keys}
    assert resumed["finetunes"][at]["top1"] == expected["finetunes"][at]["top1"]
    assert not (cell / "run").exists()  # a finished cell keeps only its record


class AskedToStop:
    """A `StopSignals` that a signal reaches once the cell starts scoring."""

    requested, signal, exit_code = False, signal.SIGTERM, 143


def test_a_stop_while_scoring_keeps_the_scored_points_and_the_rerun_scores_only_the_rest(tmp_path, data, monkeypatch):
    study = CompareConfig(backbone="test_convnext", batch_size=8, steps=(4, 8), data=str(data), threads=1)
    arm = compare_cells.Arm("energy on random-mask", "energy", {"task": "random-mask"})
    folder = tmp_path / "cell"
    stop, probe = AskedToStop(), compare_cells.probe
    monkeypatch.setattr(compare_cells, "probe", lambda *a: (setattr(stop, "requested", True), probe(*a))[1])
    with pytest.raises(compare_cells.Interrupted, match="stopped by SIGTERM while scoring"):
        compare_cells.run_cell(study, arm, 0, folder, stop=stop)
    monkeypatch.setattr(compare_cells, "probe", probe)
    saved = json.loads((folder / "cell.json").read_text())
    assert "knn_std" in saved["points"]["4"] and "knn_std" not in saved["points"]["8"]
    assert saved["points"]["8"]["steps"] == 8 and (folder / "m8" / "checkpoint.pt").is_file()
    monkeypatch.setattr(compare_cells, "pretrain", lambda *a: pytest.fail("pretrained again"))
    cell = compare_cells.run_cell(study, arm, 0, folder)
    assert "knn_std" in cell["points"]["8"] and cell["points"]["4"] == saved["points"]["4"]
    assert not (folder / "run").exists()


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def compare_here(args: list[str]) -> tuple[int, str, list[str]]:
    """`pretexts compare ARGS` in this process, so a hook can signal it at an exact point: its exit code, stdout and
    stderr lines."""
    result, _ = run_cli(args)
    return result.exit_code, result.stdout, result.stderr.strip().splitlines()


def test_a_signal_each_run_catches_too_late_stops_the_comparison_and_one_after_the_last_cell_writes_the_report(
    tmp_path, data, monkeypatch
):
    """Ctrl-C in the pretraining's last step, then in the fine-tune's last epoch's saves: each inner run ends
    normally, and the comparison stops at its next check with the cell's record saved. Then Ctrl-C just after the
    last cell's line: the report is written before it stops. Each exits 130 with its one line; each rerun continues
    where the last stopped."""
    out, steps = tmp_path / "out", 8  # two epochs of 4 steps
    args = compare_args(data, out, steps=steps, finetune_epochs=1)
    cell, random_cell = out / CELL / "cell.json", out / CELL.parent.parent / "random" / "seed0" / "cell.json"
    train_step = compare_cells.BudgetedPretrainer.train_step

    def last_step(self, images):
        stats = train_step(self, images)
        if not self.marks:  # the last budget's snapshot is taken: the run ends after this step
            ctrl_c()
        return stats

    monkeypatch.setattr(compare_cells.BudgetedPretrainer, "train_step", last_step)
    code, _, err = compare_here(args)
    assert code == 130 and err[-1].startswith("stopped by SIGINT while pretraining;"), err
    assert "Run the same command again" in err[-1], err
    point = json.loads(cell.read_text())["points"][str(steps)]
    assert point["steps"] == steps and "knn" not in point and not (out / "compare.md").exists()

    monkeypatch.setattr(compare_cells, "pretrain", lambda *a: pytest.fail("pretrained again"))
    save_checkpoint, sent = Finetuner.save_checkpoint, []

    def last_epoch_saved(self):
        path = save_checkpoint(self)
        if self.epoch == self.cfg.epochs and not sent:  # the energy cell's fine-tune: its only epoch
            sent.append(ctrl_c())
        return path

    monkeypatch.setattr(Finetuner, "save_checkpoint", last_epoch_saved)
    code, printed, err = compare_here(args)
    assert code == 130 and err[-1].startswith("stopped by SIGINT while between cells;"), err
    assert "[1/2] energy on random-mask, seed 0: kNN" in printed, printed
    assert str(steps) in json.loads(cell.read_text())["finetunes"]
    assert not random_cell.exists() and not (out / "compare.md").exists()

    monkeypatch.setattr(Finetuner, "save_checkpoint", save_checkpoint)
    echo = click.echo

    def after_the_last_line(message=None, *a, **kw):
        echo(message, *a, **kw)
        if str(message).startswith("[2/2]"):
            ctrl_c()

    monkeypatch.setattr(click, "echo", after_the_last_line)
    code, printed, err = compare_here(args)
    assert code == 130, err
    assert err[-1] == f"stopped by SIGINT after the last cell; every cell is done and the report is written in {out}/."
    assert random_cell.is_file() and all((out / name).is_file() for name in OUTPUTS), printed

    monkeypatch.setattr(click, "echo", echo)
    code, printed, err = compare_here(args)
    assert code == 0 and printed.count("(cached)") == 2, (printed, err)

    # the Python API: the same late signal raises `Interrupted` carrying the record `compare` would have returned
    study = CompareConfig(
        backbone="test_convnext", batch_size=8, threads=1, workers=0, tasks=("random-mask",), methods=("energy",),
        seeds=(0,), steps=(steps,), finetune_epochs=1, device="cpu", data=str(data), out=str(out), quiet=True,
    )  # fmt: skip
    signalled = []
    with pytest.raises(compare_cells.Interrupted) as stopped:  # the first line echoed is the report's table
        compare_api(study, echo=lambda line: signalled or signalled.append(ctrl_c()))
    assert stopped.value.finished and stopped.value.exit_code == 130
    assert stopped.value.record == compare_api(study, echo=lambda line: None)


def test_a_signal_in_the_random_init_cell_names_what_it_was_doing(tmp_path, data, monkeypatch):
    """The random-init row pretrains nothing: its stop does not say 'while pretraining'."""
    study = CompareConfig(
        backbone="test_convnext",
        tasks=("random-mask",),
        steps=(1,),
        batch_size=8,
        data=str(data),
        out=str(tmp_path),
    )
    random_init = next(arm for arm in compare_cells.arms_for(study.tasks, study.methods) if arm.method is None)
    stop = type("Stop", (), {"requested": False, "exit_code": 143, "signal": signal.SIGTERM})()
    untrained = compare_cells.untrained
    monkeypatch.setattr(compare_cells, "untrained", lambda *a: (setattr(stop, "requested", True), untrained(*a))[1])
    with pytest.raises(compare_cells.Interrupted, match="^stopped by SIGTERM while building the random-init start$"):
        compare_cells.cell_results(study, random_init, 0, tmp_path / "cell", keep_checkpoints=False, stop=stop)
