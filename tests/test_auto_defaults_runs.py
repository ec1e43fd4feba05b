"""A ViT run of the energy method records what loss=auto and positions=auto resolved to (patch-centred, the sin-cos
table) and resumes exactly with them; a run that trained with mse or learned positions (every checkpoint before
those defaults) resumes with them from the command line."""

import json

import pytest
import torch
from click.testing import CliRunner
from test_resume import assert_resume_is_exact, config

from pretexts.backbones.vit_tokens import sincos_pos_embed
from pretexts.cli import main
from pretexts.engine import load_checkpoint

RUN = ["train", "--backbone", "vit_tiny", "--img-size", "16", "--batch-size", "16", "--max-steps-per-epoch", "1"]
RUN += ["--workers", "0", "--eval-images", "16", "--figure-images", "2"]


@pytest.mark.slow
def test_a_vit_run_records_the_resolved_defaults_and_resumes_exactly(tmp_path):
    assert_resume_is_exact(lambda name, **extra: config(tmp_path / name, 2, "vit_tiny", img_size=16, **extra))
    for run in ("straight", "split"):
        saved = json.loads((tmp_path / run / "config.json").read_text())["method_args"]
        assert (saved["loss"], saved["loss_patch"], saved["positions"]) == ("patch-centred", None, "sincos")
        positions = load_checkpoint(tmp_path / run / "checkpoint.pt")["model"]["backbone.pos_embed"]
        torch.testing.assert_close(positions[0, 1:], sincos_pos_embed((4, 4), 192))  # frozen for two epochs


@pytest.mark.slow
def test_a_vit_run_that_trained_with_mse_resumes_with_mse(tmp_path):
    out = tmp_path / "run"
    first = CliRunner().invoke(main, [*RUN, "--out", str(out), "--epochs", "1", "--method-arg", "loss=mse"])
    assert first.exit_code == 0, first.output
    resumed = CliRunner().invoke(main, [*RUN, "--out", str(out), "--epochs", "2", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    saved = json.loads((out / "config.json").read_text())
    assert (saved["epochs"], saved["method_args"]["loss"]) == (2, "mse")
    assert "energy: loss mse, positions sincos (" in resumed.output  # what auto gave a new ViT run
