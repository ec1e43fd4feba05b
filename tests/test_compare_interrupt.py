"""`pretexts compare` stops like `train`: SIGTERM or Ctrl-C in any phase of a cell (pretraining, scoring,
fine-tuning) saves what the phase has, prints one line saying to run the same command again, and exits with the
signal's code; the rerun continues the cell to the numbers an uninterrupted comparison gives."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_runs import one_torch_thread, start_pretexts, tiny_image_folder  # noqa: F401 (a fixture)

from pretexts.engine.compare import cells as compare_cells
from pretexts.engine.compare.config import CompareConfig

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
    """A `StopSignals` a signal has reached."""

    requested, signal, exit_code = True, signal.SIGTERM, 143


def test_a_stop_while_scoring_keeps_the_scored_points_and_the_rerun_scores_only_the_rest(tmp_path, data, monkeypatch):
    study = CompareConfig(backbone="test_convnext", batch_size=8, steps=(4, 8), data=str(data), threads=1)
    arm = compare_cells.Arm("energy on random-mask", "energy", {"task": "random-mask"})
    folder = tmp_path / "cell"
    with pytest.raises(compare_cells.Interrupted, match="stopped by SIGTERM while scoring"):
        compare_cells.run_cell(study, arm, 0, folder, stop=AskedToStop())
    saved = json.loads((folder / "cell.json").read_text())
    assert "knn_std" in saved["points"]["4"] and "knn_std" not in saved["points"]["8"]
    assert saved["points"]["8"]["steps"] == 8 and (folder / "m8" / "checkpoint.pt").is_file()
    monkeypatch.setattr(compare_cells, "pretrain", lambda *a: pytest.fail("pretrained again"))
    cell = compare_cells.run_cell(study, arm, 0, folder)
    assert "knn_std" in cell["points"]["8"] and cell["points"]["4"] == saved["points"]["4"]
    assert not (folder / "run").exists()
