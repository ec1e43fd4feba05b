"""A ViT run that trained with a loss other than what loss=auto resolves to resumes with it from the command line
(what auto resolves to, recorded and resumed exactly: tests/test_schedule_auto.py)."""

import json

from click.testing import CliRunner

from pretexts.cli import main

RUN = ["train", "--backbone", "test_vit", "--batch-size", "16", "--max-steps-per-epoch", "1"]
RUN += ["--workers", "0", "--eval-images", "16", "--figure-images", "2"]


def test_a_vit_run_that_trained_with_mse_resumes_with_mse(tmp_path):
    out = tmp_path / "run"
    first = CliRunner().invoke(main, [*RUN, "--out", str(out), "--epochs", "1", "--method-arg", "loss=mse"])
    assert first.exit_code == 0, first.output
    resumed = CliRunner().invoke(main, [*RUN, "--out", str(out), "--epochs", "2", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    saved = json.loads((out / "config.json").read_text())
    assert (saved["epochs"], saved["method_args"]["loss"]) == (2, "mse")
    assert "energy: loss mse, positions sincos (" in resumed.output  # what auto gave a new ViT run
