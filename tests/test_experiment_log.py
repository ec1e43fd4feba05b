"""--logger tensorboard: the event file holds each step's scalars, the held-out error and the figure."""

import json

import pytest
from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pretexts.engine import PretrainConfig
from pretexts.engine.training.experiment_log import flat_scalars
from pretexts.errors import ParameterError


def events(out) -> EventAccumulator:
    accumulator = EventAccumulator(str(out / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    return accumulator.Reload()


def test_tensorboard_holds_the_scalars_the_held_out_error_and_the_figure(tmp_path):
    out = tmp_path / "run"
    result, _ = run_cli(
        [
            *TRAIN,
            "--epochs",
            "2",
            "--max-steps-per-epoch",
            "2",
            "--workers",
            "0",
            "--logger",
            "tensorboard",
            "--out",
            out,
        ]
    )
    assert result.exit_code == 0, result.output
    logged = events(out)
    tags = logged.Tags()
    assert {"loss", "lr", "alpha", "held_out/corrupted_mse", "held_out/restored_mse_step2"} <= set(tags["scalars"])
    assert [e.step for e in logged.Scalars("loss")] == [1, 2, 3, 4]
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e.value for e in logged.Scalars("loss")] == pytest.approx([r["loss"] for r in rows])
    assert [e.step for e in logged.Scalars("held_out/corrupted_mse")] == [2, 4]  # each epoch
    final = json.loads((out / "results.json").read_text())["held_out"]["restored_mse"][-1]
    assert logged.Scalars("held_out/restored_mse_step2")[-1].value == pytest.approx(final)
    figures = logged.Images("restoration")
    assert [e.step for e in figures] == [2, 4] and figures[0].width > 100


def test_resume_purges_tensorboard_events_past_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    args = [*TRAIN, "--max-steps-per-epoch", "2", "--workers", "0", "--logger", "tensorboard", "--out", out]
    assert run_cli([*args, "--epochs", "1"])[0].exit_code == 0
    assert run_cli([*args, "--epochs", "2", "--resume"])[0].exit_code == 0
    assert [e.step for e in events(out).Scalars("loss")] == [1, 2, 3, 4]


def test_unknown_logger_and_missing_package_are_clear_errors(monkeypatch):
    with pytest.raises(ParameterError, match="logger must be one of jsonl, tensorboard, wandb"):
        PretrainConfig(logger="mlflow")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ParameterError, match=r'pip install "pretexts\[wandb\]"'):
        PretrainConfig(logger="wandb")


def test_nested_results_flatten_to_scalar_names():
    assert flat_scalars(
        {
            "loss": 0.5,
            "skipped": True,
            "held_out": {"corrupted_mse": 2, "restored_mse": [1.0, 0.5], "images": 8, "method": "energy"},
        }
    ) == {
        "loss": 0.5,
        "held_out/corrupted_mse": 2.0,
        "held_out/restored_mse_step1": 1.0,
        "held_out/restored_mse_step2": 0.5,
        "held_out/images": 8.0,
    }


def test_wandb_gets_the_same_scalars_and_figures_offline_and_resumes_its_run(tmp_path, monkeypatch):
    """wandb is replaced at its module boundary (it is an optional extra); the calls pretexts makes are real."""
    import sys
    import types

    calls = []

    class Run:
        id = "run-123"

        def log(self, values, step):
            calls.append(("log", step, sorted(values)))

        def finish(self):
            calls.append(("finish",))

    def init(**kwargs):
        calls.append(("init", kwargs["mode"], kwargs["id"], kwargs["resume"], kwargs["config"]["logger"]))
        return Run()

    fake = types.SimpleNamespace(init=init, Image=lambda path: ("image", path))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "wandb" else real(name, *a))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "run"
    args = [*TRAIN, "--max-steps-per-epoch", "2", "--workers", "0", "--logger", "wandb", "--out", out]
    assert run_cli([*args, "--epochs", "1"])[0].exit_code == 0
    assert calls[0] == ("init", "offline", None, None, "wandb") and calls[-1] == ("finish",)
    steps = [c[1] for c in calls if c[0] == "log"]
    assert steps[:2] == [1, 2] and ("log", 2, ["restoration"]) in calls
    assert any(c[0] == "log" and "held_out/corrupted_mse" in c[2] for c in calls)
    calls.clear()
    assert run_cli([*args, "--epochs", "2", "--resume"])[0].exit_code == 0
    assert calls[0][:4] == ("init", "offline", "run-123", "allow")  # the same W&B run continues
