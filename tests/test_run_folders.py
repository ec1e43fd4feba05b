"""A run never writes over another run or its inputs, one process writes a folder at a time, files are replaced
by rename (never through a link), --resume keeps the run's settings, and non-finite weights are never saved."""

import json
import shutil
import socket
import subprocess
import sys

import pytest
import torch
from cli_runs import TRAIN, copy_sample_images, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from pretrained_checkpoints import finetune_argv, write_checkpoint

from pretexts.engine import PretrainConfig, Pretrainer
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.training.file_writes import write_json
from pretexts.engine.training.resume_config import same_file
from pretexts.errors import NonFiniteLossError


def train_args(out, *extra) -> list:
    return [*TRAIN, "--epochs", "1", "--max-steps-per-epoch", "2", "--workers", "0", "--out", out, *extra]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished `train_args` run, trained once for the module; `finished_run` copies it where a test needs it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    result, _ = run_cli(train_args(out))
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def finished_run(finished, tmp_path):
    """A copy of `finished` at tmp_path/run, the test's to change."""
    return shutil.copytree(finished, tmp_path / "run")


def test_train_into_a_folder_holding_a_run_is_refused_and_loses_nothing(finished_run):
    out = finished_run
    checkpoint, log = (out / "checkpoint.pt").read_bytes(), (out / "log.jsonl").read_text()
    result, error = run_cli(train_args(out))
    assert result.exit_code == 2 and "already holds a run" in error and "--resume" in error and "--force" in error
    assert (out / "checkpoint.pt").read_bytes() == checkpoint and (out / "log.jsonl").read_text() == log


def test_a_run_stopped_before_its_first_checkpoint_is_pointed_to_force_not_round_in_a_circle(finished_run):
    out = finished_run  # what a run killed in its first epoch leaves: its config and log, no checkpoint
    (out / "checkpoint.pt").unlink()
    result, error = run_cli(train_args(out))
    assert result.exit_code == 2 and "saved no checkpoint" in error and "--force" in error
    assert "--resume" not in error
    result, error = run_cli(train_args(out, "--resume"))
    assert result.exit_code == 2 and "drop --resume and start it over with --force" in error
    assert (out / "log.jsonl").is_file() and (out / "config.json").is_file()  # nothing removed by refusing


def test_a_folder_holding_only_what_a_run_writes_before_its_first_checkpoint_is_started_over(finished_run):
    """A job killed in its first epoch (a lost node, an out-of-memory kill) leaves its config, log and list of
    unreadable images: the requeued command, without --resume as the SLURM script runs it then, starts it over."""
    out = finished_run
    for item in out.iterdir():
        if item.name not in ("config.json", "log.jsonl"):
            shutil.rmtree(item) if item.is_dir() else item.unlink()
    (out / "skipped_images.txt").write_text("x.jpg\tcannot be read\n")
    (out / "mine.txt").write_text("the user's")
    settings = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**settings, "out": str(out)}))  # the copy's own run
    result, error = run_cli(train_args(out, "--resume"))
    assert result.exit_code == 2 and "drop --resume to start it over (it stopped before its first checkpoint)" in error
    result, error = run_cli(train_args(out))
    assert result.exit_code == 0, result.output
    assert "held a run that stopped before saving anything to continue (log.jsonl, config.json" in result.output
    assert (out / "checkpoint.pt").is_file() and not (out / "skipped_images.txt").exists()
    assert (out / "mine.txt").read_text() == "the user's"


def test_resuming_a_finished_run_says_nothing_is_left_and_keeps_its_weights(finished_run):
    out = finished_run
    checkpoint = (out / "checkpoint.pt").read_bytes()
    result, _ = run_cli(train_args(out, "--resume"))  # a requeued job of a finished run ends well
    assert result.exit_code == 0, result.output
    assert (
        "has done all 1 epochs asked: nothing is left to train" in result.output and "raise --epochs" in result.output
    )
    assert (out / "checkpoint.pt").read_bytes() == checkpoint


def test_force_starts_the_run_over_with_a_fresh_log(finished_run):
    out = finished_run
    result, _ = run_cli(train_args(out, "--force"))
    assert result.exit_code == 0, result.output
    steps = [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # not 1, 2, 1, 2


def test_finetune_into_a_folder_holding_a_run_is_refused(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    out = tmp_path / "ft"
    args = finetune_argv(ckpt, out)
    assert run_cli(args)[0].exit_code == 0
    result, error = run_cli(args)
    assert result.exit_code == 2 and "already holds a run" in error
    assert run_cli([*args, "--force"])[0].exit_code == 0


def test_a_resume_naming_its_checkpoint_by_another_path_continues(tmp_path, monkeypatch):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    out = tmp_path / "ft"
    assert run_cli(finetune_argv(ckpt.resolve(), out))[0].exit_code == 0
    monkeypatch.chdir(tmp_path)  # the same checkpoint, spelt relative: the same run
    result, error = run_cli(finetune_argv("pretrain.pt", "ft", "--resume", epochs=2))
    assert result.exit_code == 0, error
    assert json.loads((out / "results.json").read_text())["epochs"] == 2
    result, error = run_cli(finetune_argv("pretrain.pt", "ft", "--resume", "--recipe", "paper", epochs=3))
    assert result.exit_code == 2 and "recipe='small'" in error, error
    assert "fine-tuning" not in result.output  # refused before a start line that would list the recipe as given


def test_a_finetune_started_with_relative_paths_resumes_from_another_folder(tmp_path, monkeypatch):
    write_checkpoint(tmp_path / "pretrain.pt")
    monkeypatch.chdir(tmp_path)
    assert run_cli(finetune_argv("pretrain.pt", "ft"))[0].exit_code == 0
    assert json.loads((tmp_path / "ft" / "config.json").read_text())["checkpoint"] == str(tmp_path / "pretrain.pt")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    args = ["finetune", "--resume", "--epochs", "2", "--max-steps-per-epoch", "1", "--quiet", "--out", tmp_path / "ft"]
    result, error = run_cli(args)
    assert result.exit_code == 0, error
    assert json.loads((tmp_path / "ft" / "results.json").read_text())["epochs"] == 2


def test_a_relative_path_saved_by_an_earlier_run_matches_only_its_own_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pretrain.pt").write_bytes(b"")
    assert same_file("pretrain.pt", str(tmp_path / "pretrain.pt"))  # what the run records now, in the same folder
    assert not same_file("pretrain.pt", str(tmp_path / "other.pt"))


def test_a_segmentation_records_its_data_folder_absolute(tmp_path, monkeypatch):
    write_generated(tmp_path / "segdata")
    monkeypatch.chdir(tmp_path)
    args = ["segment", "--from-scratch", "--backbone", "test_convnext", "--data", "segdata", "--head", "linear"]
    result, error = run_cli([*args, "--max-steps", "1", "--batch-size", "4", "--workers", "0", "--out", "seg"])
    assert result.exit_code == 0, error
    assert json.loads((tmp_path / "seg" / "config.json").read_text())["data"] == str(tmp_path / "segdata")


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


# ---- never over another run, never over an input ------------------------------------------------
def test_resume_from_another_folder_into_a_run_is_refused_and_loses_nothing(tmp_path, finished_run):
    a, b = finished_run, tmp_path / "b"
    assert run_cli(train_args(b, "--seed", "1"))[0].exit_code == 0
    before = {name: (b / name).read_bytes() for name in ("checkpoint.pt", "log.jsonl", "config.json", "results.json")}
    result, error = run_cli(
        [
            *TRAIN,
            "--epochs",
            "2",
            "--max-steps-per-epoch",
            "2",
            "--workers",
            "0",
            "--resume",
            a / "checkpoint.pt",
            "--out",
            b,
        ]
    )
    assert result.exit_code == 2 and "already holds a run" in error, result.output
    assert {name: (b / name).read_bytes() for name in before} == before


def test_probe_and_segment_refuse_a_run_folder_and_the_folder_of_their_input(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "checkpoint.pt")
    probe = ["probe", "--checkpoint", ckpt, "--probe", "knn", "--workers", "0"]
    result, error = run_cli([*probe, "--out", tmp_path / "p"])
    assert result.exit_code == 0, result.output
    results = (tmp_path / "p" / "results.json").read_text()
    result, error = run_cli([*probe, "--out", tmp_path / "p"])  # a second probe: not silently replaced
    assert result.exit_code == 2 and "already holds a run" in error and "--force" in error
    assert (tmp_path / "p" / "results.json").read_text() == results
    assert run_cli([*probe, "--out", tmp_path / "p", "--force"])[0].exit_code == 0
    result, error = run_cli([*probe, "--out", tmp_path, "--force"])  # --force never removes the input
    assert result.exit_code == 2 and "would overwrite this command's input" in error
    assert ckpt.is_file()
    result, error = run_cli(["segment", "--checkpoint", ckpt, "--data", "generated", "--out", tmp_path / "p"])
    assert result.exit_code == 2 and "already holds a run" in error
    assert (tmp_path / "p" / "results.json").is_file()


def test_figures_never_replace_a_file_or_take_a_wrong_suffix(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "checkpoint.pt")
    (tmp_path / "results.json").write_text('{"kept": true}')
    for command, extra in (("restore", []), ("energy", ["--workers", "0"])):
        args = [command, "--checkpoint", ckpt, "--images", "2", *extra, "--out"]
        for force in ([], ["--force"]):  # its .json would replace the run's results.json: never, even forced
            result, error = run_cli([*args, tmp_path / "results.png", *force])
            assert result.exit_code == 2 and "results.json is a file of the run in" in error, error
            assert "--force does not replace" in error and not (tmp_path / "results.png").exists(), error
        result, error = run_cli([*args, tmp_path / "x.pt"])
        assert result.exit_code == 2 and "must be a figure file" in error, error
        figure = tmp_path / f"{command}.png"
        assert run_cli([*args, figure])[0].exit_code == 0
        result, error = run_cli([*args, figure])
        assert result.exit_code == 2 and "already exist" in error, error
        assert run_cli([*args, figure, "--force"])[0].exit_code == 0
    assert (tmp_path / "results.json").read_text() == '{"kept": true}'


# ---- one writer at a time -----------------------------------------------------------------------
def test_a_folder_written_by_a_live_process_is_refused_naming_it(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".lock").write_text(
            json.dumps(
                {"pid": holder.pid, "host": socket.gethostname(), "command": "train", "since": "2026-01-01 00:00:00"}
            )
        )
        result, error = run_cli(train_args(out))
        assert result.exit_code == 2 and f"pid {holder.pid}" in error and "being written by" in error, result.output
        assert not (out / "log.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    result, _ = run_cli(train_args(out))  # the holder has died: its lock is stale and taken over
    assert result.exit_code == 0, result.output
    assert "took over the lock" in result.output and not (out / ".lock").exists()


def test_temporary_files_of_a_live_process_are_left_alone(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".results.json.{holder.pid}.abcd1234.tmp"
        dead = tmp_path / ".results.json.999999999.abcd1234.tmp"
        live.write_text("being written")
        dead.write_text("left by a killed write")
        write_json(tmp_path / "results.json", {"a": 1})
        assert live.exists() and not dead.exists()
        assert json.loads((tmp_path / "results.json").read_text()) == {"a": 1}
    finally:
        holder.kill()
        holder.wait()


# ---- files are replaced, never written through a link -------------------------------------------
def test_resume_never_writes_through_a_symlink(tmp_path, finished_run):
    out = finished_run
    outside = {name: tmp_path / f"outside-{name}" for name in ("log.jsonl", "config.json", "results.json")}
    for name, target in outside.items():
        target.write_text(f"precious {name}\n")
        (out / name).unlink()
        (out / name).symlink_to(target)
    result, _ = run_cli(
        [*TRAIN, "--epochs", "2", "--max-steps-per-epoch", "2", "--workers", "0", "--out", out, "--resume"]
    )
    assert result.exit_code == 0, result.output
    for name, target in outside.items():
        assert target.read_text() == f"precious {name}\n", name
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 0, name


# ---- --resume keeps the run's settings ----------------------------------------------------------
def test_resume_keeps_the_saved_settings_and_refuses_changes_to_the_run(tmp_path, monkeypatch):
    data = copy_sample_images(tmp_path / "data", 10)
    out = tmp_path / "run"
    monkeypatch.chdir(tmp_path)  # a relative --data is recorded absolute: probe and finetune read it from anywhere
    first = [
        *TRAIN,
        "--data",
        "data",
        "--seed",
        "3",
        "--epochs",
        "1",
        "--max-steps-per-epoch",
        "1",
        "--workers",
        "0",
        "--eval-images",
        "4",
        "--out",
        out,
    ]
    assert run_cli(first)[0].exit_code == 0
    monkeypatch.chdir(out)
    result, _ = run_cli(["train", "--resume", "--out", out, "--epochs", "2", "--workers", "0"])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "config.json").read_text())
    assert (saved["data"], saved["batch_size"], saved["seed"], saved["backbone"]) == (str(data), 8, 3, "test_convnext")
    assert (saved["max_steps_per_epoch"], saved["eval_images"], saved["epochs"]) == (1, 4, 2)
    for option, value in (
        ("--batch-size", "16"),
        ("--seed", "4"),
        ("--data", "sample"),
        ("--lr", "0.5"),
        ("--max-steps-per-epoch", "3"),
    ):
        result, error = run_cli(["train", "--resume", "--out", out, "--epochs", "3", option, value])
        assert result.exit_code == 2 and "a resumed run keeps its" in error and option in error, (option, error)
    assert json.loads((out / "config.json").read_text()) == saved


# ---- weights are finite before they are saved ---------------------------------------------------
def test_nonfinite_weights_are_never_saved_as_the_last_good_checkpoint(tmp_path):
    cfg = PretrainConfig(
        backbone="test_convnext",
        batch_size=8,
        epochs=1,
        max_steps_per_epoch=1,
        workers=0,
        eval_images=2,
        figure_images=2,
        out=str(tmp_path),
    )
    trainer = Pretrainer(cfg)
    trainer.run()
    good = (tmp_path / "checkpoint.pt").read_bytes()
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("nan"))
    with pytest.raises(NonFiniteLossError, match="NaN or infinite .* not saved; the last good checkpoint is kept"):
        trainer.save()
    assert (tmp_path / "checkpoint.pt").read_bytes() == good


def test_export_never_replaces_its_checkpoint_a_run_or_an_earlier_export(tmp_path, finished_run):
    run = finished_run
    ckpt = run / "checkpoint.pt"
    good = ckpt.read_bytes()
    for out in (ckpt, run):  # the checkpoint itself; its folder (whose config.json the export would replace)
        result, error = run_cli(["export", "--checkpoint", ckpt, "--out", out, "--force"])
        assert result.exit_code == 2 and "would overwrite this command's input" in error, error
    assert ckpt.read_bytes() == good
    record = (run / "config.json").read_bytes()
    result, error = run_cli(["export", "--checkpoint", ckpt, "--out", run / "config.pth", "--force"])
    assert result.exit_code == 2 and "config.json is a file of the run in" in error, error  # the .pth's .json
    assert (run / "config.json").read_bytes() == record and not (run / "config.pth").exists()
    for out in (tmp_path / "export", tmp_path / "weights.safetensors"):
        assert run_cli(["export", "--checkpoint", ckpt, "--out", out])[0].exit_code == 0
        result, error = run_cli(["export", "--checkpoint", ckpt, "--out", out])
        assert result.exit_code == 2 and "--force" in error, error
        assert run_cli(["export", "--checkpoint", ckpt, "--out", out, "--force"])[0].exit_code == 0


def test_a_resume_on_a_folder_that_gained_or_lost_images_is_refused(tmp_path):
    """Photos added between preemptions: the held-out split and the epoch's order would move without a word."""
    data, out = copy_sample_images(tmp_path / "data", 6), tmp_path / "run"
    args = [*TRAIN, "--data", data, "--epochs", "1", "--batch-size", "4", "--eval-images", "1", "--workers", "0"]
    result, error = run_cli([*args, "--out", out])
    assert result.exit_code == 0, result.output
    copy_sample_images(tmp_path / "more", 1)
    shutil.copy(next((tmp_path / "more" / "a").iterdir()), data / "a" / "new.png")
    result, error = run_cli([*args, "--epochs", "2", "--out", out, "--resume"])
    assert result.exit_code == 2 and f"the data '{data}' changed since" in error and "train 10 -> 11" in error, error
    (data / "a" / "new.png").unlink()
    result, error = run_cli([*args, "--epochs", "2", "--out", out, "--resume"])
    assert result.exit_code == 0, result.output


def test_a_users_own_config_json_or_logger_folder_is_never_taken_for_a_run_to_start_over(tmp_path):
    """`pretexts train --out .` in a project folder holding the user's config.json (and an offline W&B run):
    refused as before, nothing removed; only a config.json naming this --out is a run's."""
    out = tmp_path / "project"
    out.mkdir()
    (out / "config.json").write_text('{"lr": 0.1}')
    result, error = run_cli(train_args(out))
    assert result.exit_code == 2 and "already holds a run (config.json)" in error
    assert (out / "config.json").read_text() == '{"lr": 0.1}'
    (out / "config.json").write_text(json.dumps({"out": str(out)}))
    (out / "wandb").mkdir()
    result, error = run_cli(train_args(out))
    assert result.exit_code == 2 and (out / "wandb").is_dir() and (out / "config.json").is_file()
