"""`--force` starts a run over: everything the earlier run wrote in --out goes (its figures, TensorBoard events and
W&B files too, not only its checkpoint and log), for train, finetune, probe and segment alike, while a file no run
writes stays; a folder holding only a run's leftovers is refused without --force, and an input is never removed."""

import pytest
from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from pretrained_checkpoints import finetune_argv, write_checkpoint

# what earlier runs leave that the next one here does not write again
LEFTOVERS = (
    "monitor.png",
    "restoration_epoch002.png",
    "reconstruction_epoch1000.png",
    "predictions.png",
    "skipped_images.txt",
    "wandb_run_id",
    "tensorboard/events.out.tfevents.1.old",
    "wandb/offline-run-1/run.wandb",
)
USERS = ("notes.txt", "plots/restoration_epoch001.png", "sketch_epoch1.png")  # no run writes these


def plant(out, names, text="old") -> None:
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)


def wrote_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("wrote "))


def test_train_force_over_a_tensorboard_run_leaves_the_new_runs_files_alone(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "tb1"
    base = [*TRAIN, "--max-steps-per-epoch", "2", "--workers", "0", "--eval-images", "8", "--logger", "tensorboard"]
    result, _ = run_cli([*base, "--epochs", "2", "--out", out])
    assert result.exit_code == 0, result.output
    assert (out / "monitor.png").is_file() and (out / "restoration_epoch002.png").is_file()
    plant(out, USERS, "mine")
    result, _ = run_cli([*base, "--epochs", "1", "--monitor-every", "0", "--seed", "5", "--force", "--out", out])
    assert result.exit_code == 0, result.output
    assert len(list((out / "tensorboard").iterdir())) == 1  # this run's events, not the old run's steps too
    assert sorted(p.name for p in out.glob("*.png")) == ["loss_curve.png", "restoration_epoch001.png", USERS[2]]
    assert all((out / name).read_text() == "mine" for name in USERS)
    wrote = wrote_line(result.output)
    assert "monitor.png" not in wrote and "restoration_epoch001.png" in wrote, wrote


def downstream_args(command: str, ckpt, out) -> list:
    if command == "finetune":
        return finetune_argv(ckpt, out, "--force")
    if command == "probe":
        return ["probe", "--checkpoint", ckpt, "--probe", "knn", "--workers", "0", "--force", "--out", out]
    return [
        *("segment", "--from-scratch", "--backbone", "test_resnet", "--img-size", "32", "--data", "generated"),
        *("--epochs", "1", "--max-steps", "1", "--head", "linear", "--force", "--out", out),
    ]


@pytest.mark.parametrize("command", ["finetune", "probe", "segment"])
def test_downstream_force_removes_the_earlier_runs_outputs_and_keeps_the_users_files(tmp_path, command):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    out = tmp_path / "run"
    plant(out, ["results.json", *LEFTOVERS])
    plant(out, USERS, "mine")
    result, _ = run_cli(downstream_args(command, ckpt, out))
    assert result.exit_code == 0, result.output
    written = {"predictions.png"} if command == "segment" else set()  # segment draws its own again
    assert {name for name in LEFTOVERS if (out / name).exists()} == written
    assert not (out / "tensorboard").exists() and not (out / "wandb").exists()
    assert all((out / name).read_bytes() != b"old" for name in ["results.json", *written])
    assert all((out / name).read_text() == "mine" for name in USERS)


def test_a_folder_of_a_runs_leftovers_is_refused_without_force_and_loses_nothing(tmp_path):
    out = tmp_path / "run"
    plant(out, LEFTOVERS)
    result, error = run_cli([*TRAIN, "--epochs", "1", "--max-steps-per-epoch", "1", "--workers", "0", "--out", out])
    assert result.exit_code == 2 and "already holds a run (monitor.png, predictions.png" in error, error
    assert "--force" in error and "saved no checkpoint" not in error
    assert all((out / name).read_text() == "old" for name in LEFTOVERS)


def test_force_never_removes_an_input_lying_in_what_a_run_wrote(tmp_path):
    out = tmp_path / "run"
    ckpt, _ = write_checkpoint(out / "wandb" / "checkpoint.pt")
    result, error = run_cli(downstream_args("probe", ckpt, out))
    assert result.exit_code == 2 and "would overwrite this command's input" in error, error
    assert ckpt.is_file()
