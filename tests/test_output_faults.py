"""When the output side misbehaves: a second `shard` into a folder another command writes is refused; a read-only OUT
is named as such (not its lock file, no --resume hint); a full disk during `shard` names the tar and removes the
partial set; Ctrl-C while train or finetune write their end-of-run outputs says that --resume writes them."""

import errno
import json
import os
import socket
import subprocess
import sys

import pytest
from cli_runs import ONE_STEP, fails_cleanly, one_torch_thread, run_cli, tiny_image_folder  # noqa: F401

from pretexts.engine.data.datasets import SAMPLE_DIR


# ---- one writer per shard folder ----------------------------------------------------------------
@pytest.fixture
def live_pid():
    """The pid of a process that lives for the test: a lock naming it is held, not stale."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield holder.pid
    holder.kill()
    holder.wait()


def test_a_second_shard_into_a_folder_being_sharded_is_refused_in_one_line(tmp_path, live_pid):
    out = tmp_path / "shards"
    out.mkdir()
    held = {"pid": live_pid, "host": socket.gethostname(), "command": "shard", "since": "2026-01-01 00:00:00"}
    (out / ".lock").write_text(json.dumps(held))
    for force in ([], ["--force"]):  # --force replaces a finished shard set, never one being written
        result, error = run_cli(["shard", SAMPLE_DIR, out, *force])
        assert result.exit_code == 2 and "is being written by `pretexts shard`" in error, result.output
        assert f"pid {live_pid}" in error and "choose another OUT" in error, error
        assert "packing" not in result.output and "Traceback" not in result.output  # refused before the source is read
        assert sorted(p.name for p in out.iterdir()) == [".lock"]


def test_a_shard_releases_its_lock_and_a_rerun_is_refused_as_not_empty(tmp_path):
    out = tmp_path / "shards"
    assert run_cli(["shard", SAMPLE_DIR, out])[0].exit_code == 0
    assert not (out / ".lock").exists() and (out / "manifest.json").is_file()
    fails_cleanly(["shard", SAMPLE_DIR, out], "is not empty", "--force")


# ---- a read-only OUT ----------------------------------------------------------------------------
@pytest.fixture
def read_only_lock(monkeypatch):
    """Creating OUT/.lock fails as on a read-only file system (OUT exists; root is not stopped by chmod)."""
    opened = os.open

    def read_only(path, flags, *args, **kwargs):
        if os.path.basename(path) == ".lock" and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return opened(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)


@pytest.mark.parametrize("command", ["shard", "train"])
def test_a_read_only_out_is_named_with_no_lock_file_and_no_resume_hint(tmp_path, read_only_lock, command):
    out = tmp_path / "ro"
    out.mkdir()
    args = ["shard", SAMPLE_DIR, out] if command == "shard" else [*ONE_STEP, "--data", "sample", "--out", out]
    result, error = run_cli(args)
    option = "OUT" if command == "shard" else "--out"
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert error == f"Error: output folder '{out}' cannot be written: Read-only file system; choose another {option}."
    assert "packing" not in result.output and list(out.iterdir()) == []


def test_a_path_error_names_resume_only_in_a_command_that_has_it(tmp_path, monkeypatch):
    def unlistable(root):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(root))

    monkeypatch.setattr("pretexts.engine.data.shard_writer.list_images", unlistable)
    error = fails_cleanly(["shard", SAMPLE_DIR, tmp_path / "out"], os.strerror(errno.EACCES), str(SAMPLE_DIR))
    assert "--resume" not in error, error
    assert not (tmp_path / "out").exists()  # the folder its lock made is removed


# ---- a full disk during shard -------------------------------------------------------------------
def test_a_full_disk_during_shard_names_the_tar_and_removes_the_partial_set(tmp_path, monkeypatch):
    from webdataset.writer import TarWriter

    written, write = [], TarWriter.write

    def fills_at_150(self, sample):  # the disk fills while the second shard of 100 is being written
        if len(written) == 150:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(sample)
        return write(self, sample)

    out = tmp_path / "shards"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")  # kept: only the shards are removed
    args = ["shard", SAMPLE_DIR, out, "--shard-size", "100", "--force"]
    with monkeypatch.context() as patch:
        patch.setattr(TarWriter, "write", fills_at_150)
        error = fails_cleanly(args, f"cannot write '{out / 'train-000001.tar'}': No space left on device")
    assert "were removed" in error and "Free some space" in error and "--resume" not in error, error
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert run_cli(args)[0].exit_code == 0  # once there is room, the same command writes the set
    assert (out / "manifest.json").is_file()


# ---- Ctrl-C while the end-of-run outputs are written ---------------------------------------------
def ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt  # the loop's signal handler is gone by then: Ctrl-C raises


def test_ctrl_c_while_train_writes_its_results_says_resume_writes_them(tmp_path, monkeypatch):
    from pretexts.engine.training.loop import Pretrainer

    out, args = tmp_path / "run", [*ONE_STEP, "--data", tiny_image_folder(tmp_path / "data")]
    with monkeypatch.context() as patch:
        patch.setattr(Pretrainer, "write_results", ctrl_c)
        result, _ = run_cli([*args, "--out", out])
    assert result.exit_code == 130, result.output
    said = f"Interrupted. '{out / 'checkpoint.pt'}' is whole: the same command with --resume continues from it, and "
    assert f"{said}writes the missing results.json." in result.output, result.output
    assert not (out / "results.json").exists()
    result, _ = run_cli([*args, "--out", out, "--resume"])
    assert result.exit_code == 0 and (out / "results.json").is_file(), result.output


def test_ctrl_c_while_finetune_writes_its_outputs_says_resume_writes_them(tmp_path, monkeypatch):
    data = tiny_image_folder(tmp_path / "data")
    assert run_cli([*ONE_STEP, "--data", data, "--out", tmp_path / "base"])[0].exit_code == 0
    out = tmp_path / "ft"
    args = ["finetune", "--checkpoint", tmp_path / "base" / "checkpoint.pt", "--data", data, "--epochs", "1"]
    args += ["--batch-size", "8", "--workers", "0", "--out", out]
    with monkeypatch.context() as patch:
        patch.setattr("pretexts.engine.evaluation.finetune.finetune_results", ctrl_c)
        result, _ = run_cli(args)
    assert result.exit_code == 130, result.output
    assert "--resume continues from it, and writes the missing finetuned.pt and results.json." in result.output
    result, _ = run_cli([*args, "--resume"])
    assert result.exit_code == 0 and (out / "finetuned.pt").is_file() and (out / "results.json").is_file()


def test_ctrl_c_before_a_run_saved_anything_is_a_bare_interrupted(tmp_path, monkeypatch):
    from pretexts.engine.training.loop import Pretrainer

    with monkeypatch.context() as patch:
        patch.setattr(Pretrainer, "train_and_report", ctrl_c)
        result, _ = run_cli([*ONE_STEP, "--data", tiny_image_folder(tmp_path / "data"), "--out", tmp_path / "run"])
    assert result.exit_code == 130 and result.output.strip().endswith("Interrupted."), result.output


def test_a_refused_command_leaves_none_of_the_folders_its_out_needed(tmp_path):
    """The lock made OUT's missing parents too; a refused shard removed OUT alone and left deep/a/b behind."""
    (tmp_path / "empty").mkdir()
    result, error = run_cli(["shard", tmp_path / "empty", tmp_path / "deep" / "a" / "b" / "out"])
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "deep").exists()
    (tmp_path / "kept").mkdir()  # a parent that was there stays
    run_cli(["shard", tmp_path / "empty", tmp_path / "kept" / "a" / "out"])
    assert (tmp_path / "kept").is_dir() and not (tmp_path / "kept" / "a").exists()
