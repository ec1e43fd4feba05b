"""--eval-every N: the held-out error is measured once at a step, however many outputs ask for it (the step's log
line, the logging backend, the epoch's end, results.json)."""

import json

from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pretexts.engine.training.loop import Pretrainer


def test_an_epoch_ending_on_an_eval_every_step_measures_and_logs_the_held_out_error_once(tmp_path, monkeypatch):
    measured = []
    evaluate = Pretrainer.held_out_error
    monkeypatch.setattr(Pretrainer, "held_out_error", lambda self: measured.append(self.global_step) or evaluate(self))
    out = tmp_path / "run"
    options = ["--epochs", "1", "--max-steps-per-epoch", "2", "--workers", "0", "--monitor-every", "0"]
    options += ["--eval-images", "2", "--figure-images", "2", "--eval-every", "2", "--logger", "tensorboard"]
    result, _ = run_cli([*TRAIN, *options, "--out", out])
    assert result.exit_code == 0, result.output
    assert measured == [2]
    logged = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0}).Reload()
    assert [e.step for e in logged.Scalars("held_out/corrupted_mse")] == [2]
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    final = json.loads((out / "results.json").read_text())["held_out"]
    assert [r["step"] for r in rows if "held_out" in r] == [2] and rows[-1]["held_out"] == final
