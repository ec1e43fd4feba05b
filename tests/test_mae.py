"""`train --method mae`: MAE's masking and loss in the project's loop (its checkpoint going downstream and its
resume are test_every_method's, as for every method)."""

import json

import pytest
from cli_runs import one_torch_thread, run_cli  # noqa: F401 (a fixture)

from pretexts.engine import load_checkpoint

FAST = [
    "train",
    "--method",
    "mae",
    "--backbone",
    "test_vit",  # timm's 0.4M-parameter ViT: 4 patches of 16 px at 32 px
    "--batch-size",
    "16",
    "--max-steps-per-epoch",
    "2",
    "--workers",
    "0",
    "--set",
    "eval_images=16",
    "--set",
    "figure_images=2",
]


@pytest.fixture(scope="module")
def mae_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mae") / "run"
    result, error = run_cli([*FAST, "--epochs", "2", "--method-arg", "mask_ratio=0.5", "--out", out])
    assert result.exit_code == 0, error or result.output
    assert "MAE masking (50% of patches; --task unused)" in result.output
    return out, result.output


def test_mae_trains_and_reports_the_masked_patch_error(mae_run):
    out, output = mae_run
    held = json.loads((out / "results.json").read_text())["held_out"]
    assert held["method"] == "mae" and len(held["restored_mse"]) == 1
    assert held["corrupted_mse"] == pytest.approx(1.0, abs=0.05)  # norm_pix targets: predicting 0 scores ~1
    assert (
        "held-out masked-patch MSE (per-patch normalised pixels) on" in output
        and "patch-mean fill" in output
        and "step 1" not in output
    )
    assert (out / "reconstruction_epoch002.png").is_file() and not list(out.glob("restoration_epoch*"))
    saved = json.loads((out / "config.json").read_text())  # every argument as the method resolved it
    assert saved["method_args"] == {
        "mask_ratio": 0.5,
        "decoder_dim": 0,
        "decoder_depth": 0,
        "decoder_heads": 0,
        "norm_pix_loss": True,
    }
    ckpt = load_checkpoint(out / "checkpoint.pt")
    assert any(k.startswith("decoder_blocks.") for k in ckpt["model"]) and ckpt["global_step"] == 4


def test_method_arguments_are_checked():
    result, error = run_cli([*FAST, "--method-arg", "mask_ratio=1.5"])
    assert result.exit_code == 2 and "mask_ratio' is 1.5; allowed range is [0.01, 0.99]" in error
    result, error = run_cli([*FAST, "--method-arg", "mask_rate=0.5"])
    assert result.exit_code == 2 and "has no argument 'mask_rate'; its arguments: mask_ratio" in error
    result, error = run_cli(["train", "--method-arg", "mask_ratio=0.5"])
    assert (
        result.exit_code == 2
        and "method 'energy' has no argument 'mask_ratio'; its arguments: steps, loss, alpha" in error
    )
    result, error = run_cli(["train", "--method", "mae", "--backbone", "convnext_atto"])
    assert result.exit_code == 2 and "MAE needs a ViT backbone" in error


def test_an_export_of_mae_records_no_task(mae_run, tmp_path):
    """MAE masks its own way: --task never applied, so the export's provenance names none."""
    out, _ = mae_run
    result, error = run_cli(["export", "--checkpoint", out / "checkpoint.pt", "--out", tmp_path / "exported"])
    assert result.exit_code == 0, result.output
    pretraining = json.loads((tmp_path / "exported" / "pretexts.json").read_text())["pretraining"]
    assert pretraining["method"] == "mae" and pretraining["task"] is None and pretraining["task_args"] is None


def test_the_training_figures_of_mae_name_no_task(tmp_path, monkeypatch):
    """MAE ignores --task: its loss curve and monitor are titled "mae on BACKBONE", as its epoch figure is."""
    from pretexts.engine.training import loop

    titles = []
    monkeypatch.setattr(loop, "loss_curve", lambda steps, losses, path, title, *_: titles.append(title))
    monkeypatch.setattr(loop, "monitor_figure", lambda history, path, title: titles.append(title))
    args = [*FAST, "--epochs", "1", "--set", "monitor_every=1", "--out", tmp_path / "run"]
    result, error = run_cli(args)
    assert result.exit_code == 0, result.output
    assert titles and all(t.startswith("mae on test_vit") and "random-mask" not in t for t in titles), titles
