"""A ViT run of the energy method records the loss `auto` resolved to, resumes exactly with it, and a run that
trained with mse (every checkpoint before loss=auto) resumes with mse from the command line."""

import json

from click.testing import CliRunner
from test_resume import assert_resume_is_exact, config

from pretexts.cli import main


def test_a_vit_run_records_the_patch_centred_loss_and_resumes_exactly(tmp_path):
    assert_resume_is_exact(lambda name, **extra: config(tmp_path / name, 2, "vit_tiny", img_size=32, **extra))
    for run in ("straight", "split"):
        saved = json.loads((tmp_path / run / "config.json").read_text())
        assert (saved["method_args"]["loss"], saved["method_args"]["loss_patch"]) == ("patch-centred", None)


def test_a_vit_run_that_trained_with_mse_resumes_with_mse(tmp_path):
    out = tmp_path / "run"
    run = ["train", "--backbone", "vit_tiny", "--img-size", "32", "--batch-size", "16", "--max-steps-per-epoch", "1"]
    run += ["--workers", "0", "--eval-images", "16", "--figure-images", "2", "--out", str(out)]
    first = CliRunner().invoke(main, [*run, "--epochs", "1", "--method-arg", "loss=mse"])
    assert first.exit_code == 0, first.output
    resumed = CliRunner().invoke(main, [*run, "--epochs", "2", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    saved = json.loads((out / "config.json").read_text())
    assert (saved["epochs"], saved["method_args"]["loss"]) == (2, "mse")
