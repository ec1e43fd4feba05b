"""An export records how far the pretraining run got (its epoch, global step and planned epochs), and one of a run
stopped before its planned epochs says so in one line rather than passing for a finished one."""

import json

import pytest
from cli_runs import ONE_STEP, run_cli, tiny_image_folder
from pretrained_checkpoints import finetune_argv

from pretexts.engine.training.checkpoint import load_checkpoint, save_checkpoint


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One epoch of two steps, the whole of its plan."""
    root = tmp_path_factory.mktemp("progress")
    data = tiny_image_folder(root / "data")
    args = [*ONE_STEP, "--max-steps-per-epoch", "2", "--eval-images", "2", "--monitor-every", "0"]
    result, error = run_cli([*args, "--data", data, "--out", root / "run"])
    assert result.exit_code == 0, result.output + error
    return root / "run" / "checkpoint.pt"


def export(checkpoint, out) -> tuple[dict, str]:
    result, error = run_cli(["export", "--checkpoint", checkpoint, "--out", out])
    assert result.exit_code == 0, result.output + error
    return json.loads((out / "pretexts.json").read_text())["pretraining"], result.output


def test_an_export_records_how_far_its_run_got(finished_run, tmp_path):
    pretraining, output = export(finished_run, tmp_path / "exported")
    assert (pretraining["epoch"], pretraining["global_step"], pretraining["planned_epochs"]) == (1, 2, 1)
    assert "unfinished" not in output


def test_an_unfinished_run_is_exported_with_a_note(finished_run, tmp_path):
    ckpt = load_checkpoint(finished_run)
    ckpt["config"]["epochs"] = 3  # the same checkpoint, of a run planned for 3 epochs and stopped after its first
    save_checkpoint(ckpt, tmp_path / "stopped.pt")
    pretraining, output = export(tmp_path / "stopped.pt", tmp_path / "exported")
    assert (pretraining["epoch"], pretraining["global_step"], pretraining["planned_epochs"]) == (1, 2, 3)
    notes = [line for line in output.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: {tmp_path / 'stopped.pt'} is of an unfinished run: 1 of its 3 planned epochs done (step 2); "
        "exporting the weights as they are."
    ], output


def test_a_fine_tuning_checkpoint_of_an_unfinished_run_is_noted_too(finished_run, tmp_path):
    result, error = run_cli(finetune_argv(finished_run, tmp_path / "ft"))
    assert result.exit_code == 0, result.output + error
    for name in ("checkpoint.pt", "finetuned.pt"):  # the run's last epoch state, and its final weights
        ckpt = load_checkpoint(tmp_path / "ft" / name)
        ckpt["config"]["epochs"] = 3
        save_checkpoint(ckpt, tmp_path / name)
    result, _ = run_cli(["export", "--checkpoint", tmp_path / "checkpoint.pt", "--out", tmp_path / "stopped"])
    assert "is of an unfinished run: 1 of its 3 planned epochs done (step 1)" in result.output, result.output
    result, _ = run_cli(["export", "--checkpoint", tmp_path / "finetuned.pt", "--out", tmp_path / "final"])
    assert result.exit_code == 0 and "unfinished" not in result.output  # written as a run ends
