"""A run never writes over another run, and every output folder is made (or refused) before the work."""
import json

from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from pretrained_checkpoints import write_checkpoint


def train_args(out, *extra) -> list:
    return [*TRAIN, "--epochs", "1", "--max-steps-per-epoch", "2", "--workers", "0", "--out", out, *extra]


def test_train_into_a_folder_holding_a_run_is_refused_and_loses_nothing(tmp_path):
    out = tmp_path / "run"
    result, _ = run_cli(train_args(out))
    assert result.exit_code == 0, result.output
    checkpoint, log = (out / "checkpoint.pt").read_bytes(), (out / "log.jsonl").read_text()
    result, error = run_cli(train_args(out))
    assert result.exit_code == 2 and "already holds a run" in error and "--resume" in error and "--force" in error
    assert (out / "checkpoint.pt").read_bytes() == checkpoint and (out / "log.jsonl").read_text() == log


def test_force_starts_the_run_over_with_a_fresh_log(tmp_path):
    out = tmp_path / "run"
    assert run_cli(train_args(out))[0].exit_code == 0
    result, _ = run_cli(train_args(out, "--force"))
    assert result.exit_code == 0, result.output
    steps = [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # not 1, 2, 1, 2


def test_finetune_into_a_folder_holding_a_run_is_refused(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    out = tmp_path / "ft"
    args = ["finetune", "--checkpoint", ckpt, "--epochs", "1", "--max-steps-per-epoch", "1", "--batch-size", "8",
            "--workers", "0", "--randaug", "none", "--mixup", "0", "--cutmix", "0", "--out", out]
    assert run_cli(args)[0].exit_code == 0
    result, error = run_cli(args)
    assert result.exit_code == 2 and "already holds a run" in error
    assert run_cli([*args, "--force"])[0].exit_code == 0


def test_restore_makes_a_missing_output_folder(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    fig = tmp_path / "a" / "missing" / "dir" / "x.png"
    result, error = run_cli(["restore", "--checkpoint", ckpt, "--images", "2", "--out", fig])
    assert result.exit_code == 0, error or result.output
    assert fig.is_file() and fig.with_suffix(".json").is_file()


def test_restore_into_an_unwritable_place_is_refused_before_the_work(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result, error = run_cli(["restore", "--checkpoint", ckpt, "--images", "2", "--out", blocker / "x.png"])
    assert result.exit_code == 2 and "cannot be written" in error
