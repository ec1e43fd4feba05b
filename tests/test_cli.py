"""The `pretexts` command through click's CliRunner."""
import json

from click.testing import CliRunner

from pretexts.cli import main


def test_list_shows_tasks_with_parameters():
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0, result.output
    assert "colorization" in result.output and "Grayscale input" in result.output


def test_train_writes_checkpoint_log_figure_and_reports_held_out_error(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, [
        "train", "--task", "colorization", "--backbone", "resnet18", "--epochs", "1", "--batch-size", "16",
        "--max-steps-per-epoch", "2", "--workers", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "held-out restoration MSE on 80 images: corrupted" in result.output
    assert (out / "checkpoint.pt").is_file() and (out / "restoration_epoch001.png").is_file()
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["alpha"] > 0 for r in rows)


def test_unknown_task_is_one_line_error_with_exit_code_2():
    result = CliRunner().invoke(main, ["train", "--task", "colorisation"])
    assert result.exit_code == 2
    assert "Did you mean: colorization" in result.output
    assert "Traceback" not in result.output


def test_bad_task_argument_names_the_valid_ones():
    result = CliRunner().invoke(main, ["train", "--task-arg", "scale"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
    result = CliRunner().invoke(main, ["train", "--task-arg", "scale=4"])
    assert result.exit_code == 2 and "unknown parameter 'scale'" in result.output


def test_non_positive_settings_are_refused():
    result = CliRunner().invoke(main, ["train", "--batch-size", "0"])
    assert result.exit_code == 2 and "batch_size must be > 0" in result.output


def test_restore_draws_the_figure_for_any_task(tmp_path):
    runner = CliRunner()
    out = tmp_path / "run"
    result = runner.invoke(main, ["train", "--epochs", "1", "--batch-size", "16", "--max-steps-per-epoch", "1",
                                  "--workers", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    fig = tmp_path / "sr.png"
    result = runner.invoke(main, ["restore", "--checkpoint", str(out / "checkpoint.pt"), "--task",
                                  "super-resolution", "--task-arg", "scale=4", "--images", "4", "--out", str(fig)])
    assert result.exit_code == 0, result.output
    assert fig.stat().st_size > 0
    numbers = json.loads(fig.with_suffix(".json").read_text())
    assert numbers["task"] == "super-resolution" and numbers["task_args"]["scale"] == 4
    assert numbers["images"] == 4 and len(numbers["restored_mse"]) == 2
