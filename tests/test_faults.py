"""Faults lose nothing: NaN losses, unwritable folders, full disks, and broken plugins."""

import errno
import json
import math
import os
import resource
import shutil
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from cli_runs import TRAIN, one_torch_thread, run_cli, tiny_image_folder  # noqa: F401 (autouse)
from click.testing import CliRunner
from pretrained_checkpoints import write_checkpoint
from test_registry import _install_distribution as install_distribution
from test_registry import clean_registry  # noqa: F401 (a fixture)

from pretexts.cli import main
from pretexts.engine import FinetuneConfig, Finetuner, PretrainConfig, Pretrainer, atomic_save, load_checkpoint
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.engine.training.file_writes import open_log
from pretexts.engine.training.nonfinite import NonFiniteGuard
from pretexts.errors import NonFiniteLossError, OutputError

RUN = TRAIN + ["--max-steps-per-epoch", "1", "--workers", "0"]


@pytest.fixture(scope="module")
def one_epoch(tmp_path_factory) -> Path:
    """A run of one epoch of one step, on 32 training images and 2 held-out ones."""
    out = tmp_path_factory.mktemp("run")
    data = tiny_image_folder(tmp_path_factory.mktemp("data"))
    result, _ = run_cli(RUN + ["--epochs", "1", "--data", data, "--out", out])
    assert result.exit_code == 0, result.output
    return out


def copy_of(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


# ---- NaN losses ---------------------------------------------------------------------------------
def test_nan_loss_stops_with_the_step_and_keeps_the_checkpoint(one_epoch, tmp_path):
    out = copy_of(one_epoch, tmp_path)
    # A run whose energy is scaled by 1e38 overflows in its second epoch: the restored images, and the loss, are
    # not finite. (--resume refuses to change the scale, so the saved run is given it.)
    ckpt = load_checkpoint(out / "checkpoint.pt")
    config = ckpt["config"]
    save_checkpoint(
        {**ckpt, "config": {**config, "method_args": {**config["method_args"], "energy_scale": 1e38}}},
        out / "checkpoint.pt",
    )
    good = (out / "checkpoint.pt").read_bytes()
    result, error = run_cli(RUN + ["--epochs", "2", "--out", out, "--resume"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "loss is nan at step 2" in error and "last good checkpoint is kept" in error and "--skip-nonfinite" in error
    assert (out / "checkpoint.pt").read_bytes() == good


class NanAtStep2(Pretrainer):
    def compute_loss(self, sample):
        loss = super().compute_loss(sample)
        return loss * float("nan") if self.global_step == 1 else loss


def test_skip_nonfinite_counts_the_skipped_steps(tmp_path):
    cfg = PretrainConfig(
        backbone="test_convnext",
        epochs=1,
        batch_size=8,
        max_steps_per_epoch=3,
        workers=0,
        out=str(tmp_path),
        eval_images=8,
        figure_images=2,
        skip_nonfinite=True,
    )
    results = NanAtStep2(cfg).run()
    assert results["skipped_nonfinite_steps"] == 1 and results["optimizer_steps"] == 3
    assert json.loads((tmp_path / "results.json").read_text())["skipped_nonfinite_steps"] == 1
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r.get("skipped", False) for r in rows] == [False, True, False]
    assert all(torch.isfinite(w).all() for w in load_checkpoint(tmp_path / "checkpoint.pt")["model"].values())


class InfGradientAtStep2(Pretrainer):
    """A finite loss whose gradient overflows on the way back."""

    def compute_loss(self, sample):
        loss = super().compute_loss(sample) * 1.0
        if self.global_step == 1:
            loss.register_hook(lambda grad: grad * float("inf"))
        return loss


def test_a_nonfinite_gradient_behind_a_finite_loss_never_reaches_the_weights(tmp_path):
    cfg = PretrainConfig(
        backbone="test_convnext",
        epochs=1,
        batch_size=8,
        max_steps_per_epoch=3,
        workers=0,
        out=str(tmp_path),
        eval_images=8,
        figure_images=2,
    )
    trainer = InfGradientAtStep2(cfg)
    with pytest.raises(NonFiniteLossError, match="gradient norm is (nan|inf) at step 2"):
        trainer.run()
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    cfg.skip_nonfinite, cfg.out = True, str(tmp_path / "skip")
    results = InfGradientAtStep2(cfg).run()
    assert results["skipped_nonfinite_steps"] == 1 and results["optimizer_steps"] == 3
    assert all(torch.isfinite(w).all() for w in load_checkpoint(tmp_path / "skip" / "checkpoint.pt")["model"].values())


class FinetuneNanAtStep2(Finetuner):
    def compute_loss(self, micro_batch):
        loss = super().compute_loss(micro_batch)
        return loss * float("nan") if self.global_step == 1 else loss


def test_fine_tuning_has_pretrainings_nonfinite_policy(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    common = dict(
        checkpoint=str(ckpt),
        epochs=1,
        max_steps_per_epoch=3,
        batch_size=8,
        workers=0,
        mixup=0,
        cutmix=0,
        randaug="none",
        quiet=True,
    )
    with pytest.raises(
        NonFiniteLossError, match="loss is nan at step 2; no checkpoint was written yet.*--skip-nonfinite"
    ):
        FinetuneNanAtStep2(FinetuneConfig(**common, out=str(tmp_path / "stop")), echo=lambda line: None).run()
    results = FinetuneNanAtStep2(
        FinetuneConfig(**common, skip_nonfinite=True, out=str(tmp_path / "skip")), echo=lambda line: None
    ).run()
    assert results["skipped_nonfinite_steps"] == 1 and results["optimizer_steps"] == 3
    saved = load_checkpoint(tmp_path / "skip" / "checkpoint.pt")
    assert saved["nonfinite_skipped"] == 1 and all(torch.isfinite(w).all() for w in saved["model"].values())
    assert math.isfinite(saved["history"][0]["loss"]), "the skipped step stays out of the epoch's loss"


def test_skipping_gives_up_after_many_nonfinite_steps_in_a_row():
    guard = NonFiniteGuard(skip=True, out=Path("run"), patience=3)
    assert guard.should_skip(float("nan"), 1) and guard.should_skip(float("inf"), 2)
    assert not guard.should_skip(1.0, 3)  # a good step resets the run of bad ones
    guard.should_skip(float("nan"), 4), guard.should_skip(float("nan"), 5)
    with pytest.raises(NonFiniteLossError, match="3 steps in a row"):
        guard.should_skip(float("nan"), 6)
    assert guard.skipped == 5


# ---- output folders and full disks --------------------------------------------------------------
def test_unwritable_output_folder_fails_before_training(tmp_path):
    (tmp_path / "file").write_text("")
    result, error = run_cli(RUN + ["--epochs", "1", "--out", tmp_path / "file" / "run"])
    assert result.exit_code == 2 and "cannot be written: Not a directory" in error and "choose another --out" in error


def test_too_little_free_space_fails_before_training(tmp_path, monkeypatch):
    from pretexts.engine.training import preflight

    monkeypatch.setattr(preflight.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 1 << 20))
    result, error = run_cli(RUN + ["--epochs", "1", "--out", tmp_path])
    assert result.exit_code == 2 and "has 1 MB free, but a checkpoint needs about 18 MB" in error
    assert not (tmp_path / "log.jsonl").exists()


def test_a_failed_checkpoint_write_names_the_path_and_keeps_the_old_one(one_epoch, tmp_path, monkeypatch):
    out = copy_of(one_epoch, tmp_path)
    good = (out / "checkpoint.pt").read_bytes()

    def full_disk(obj, fh):
        fh.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full_disk)
    result, error = run_cli(RUN + ["--epochs", "2", "--out", out, "--resume"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"cannot write checkpoint '{out / 'checkpoint.pt'}': No space left on device" in error
    assert "previous checkpoint is kept" in error
    assert (out / "checkpoint.pt").read_bytes() == good and not list(out.glob(".*.tmp"))


@contextmanager
def file_size_limit(limit: int):
    """The kernel refuses to grow any file of this process past `limit` bytes (EFBIG): a real failed write."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_a_real_write_failure_becomes_an_output_error(tmp_path):
    path = tmp_path / "checkpoint.pt"
    atomic_save({"weights": torch.ones(4)}, path)
    with pytest.raises(OutputError, match=f"cannot write checkpoint '{path}': File too large"):
        with file_size_limit(1 << 20):
            atomic_save({"weights": torch.zeros(1 << 20)}, path)
    assert torch.equal(torch.load(path)["weights"], torch.ones(4)) and not list(tmp_path.glob(".*.tmp"))


# ---- plugins ------------------------------------------------------------------------------------
@pytest.mark.usefixtures("clean_registry")
def test_broken_and_duplicate_plugins_are_listed_and_break_nothing(tmp_path):
    import pretexts
    from pretexts import registry

    install_distribution(
        tmp_path,
        "plugin_dup",
        """
        import pretexts

        @pretexts.register("colorization")
        class Colour(pretexts.Pretext):
            '''A second colorization.'''
        """,
        "colorization = plugin_dup:Colour",
    )
    install_distribution(
        tmp_path, "plugin_exit", "import sys\nsys.exit('cannot run here')\n", "quitter = plugin_exit:Task"
    )
    try:
        with pytest.warns(UserWarning, match="the built-in wins"):
            registry.load_plugins(force=True)
        result = CliRunner().invoke(main, ["list"])
        assert result.exit_code == 0, result.output
        assert "colorization       IGNORED plugin (the built-in 'colorization' wins): plugin_dup 1.0" in result.output
        assert (
            "registered twice" in result.output and "quitter            BROKEN plugin: plugin_exit 1.0" in result.output
        )
        assert "plugin_exit.py:2: SystemExit: cannot run here" in result.output
        assert "Grayscale input, colour target" in result.output  # the built-in still listed
        assert type(pretexts.create_pretext("colorization")).__module__ == "pretexts.tasks.colorization"
    finally:
        while str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))
        for name in ("plugin_dup", "plugin_exit"):
            sys.modules.pop(name, None)


def test_a_write_failure_outside_the_checkpoint_is_one_line_and_resume_skips_the_torn_log(
    one_epoch, tmp_path, monkeypatch
):
    """A full disk while the log is written: one line, exit 2; the torn log line does not stop --resume."""
    out = copy_of(one_epoch, tmp_path)
    from pretexts.engine.training import loop

    def full_disk_log(path, *args, **kwargs):
        handle = open_log(path, *args, **kwargs)

        def write(text):
            handle.buffer.write(text[:7].encode())  # part of a line reaches the disk, as when it fills
            handle.buffer.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        handle.write = write
        return handle

    monkeypatch.setattr(loop, "open_log", full_disk_log)
    result, error = run_cli(RUN + ["--epochs", "2", "--out", out, "--resume"])
    monkeypatch.undo()
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert error.startswith("Error: No space left on device") and "--resume" in error
    assert not (out / "log.jsonl").read_text().endswith("\n")  # the torn line is there
    result, _ = run_cli(RUN + ["--epochs", "2", "--out", out, "--resume"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()] == [1, 2]


def test_images_that_fail_to_decode_in_loader_workers_end_in_one_line_not_a_hang(tmp_path):
    """JPEGs cut in their pixel data pass the start-up scan and fail in the workers; the run must end."""
    from PIL import Image

    for split, count in (("train", 12), ("val", 2)):
        folder = tmp_path / "data" / split / "a"
        folder.mkdir(parents=True)
        for i in range(count):
            path = folder / f"{i}.jpg"
            Image.effect_noise((64, 64), 60).convert("RGB").save(path, quality=95)
            data = path.read_bytes()
            path.write_bytes(data[: len(data) * 2 // 3])  # header intact, pixels cut
    args = [*TRAIN, "--workers", "2", "--epochs", "1", "--data", tmp_path / "data", "--out", tmp_path / "run"]
    result, error = run_cli(args)
    assert result.exit_code == 2, result.output[-2000:]
    assert result.output.strip().splitlines()[-1] == error and "cannot be read" in error, result.output[-2000:]
    assert "Traceback" not in result.output and "Original" not in result.output
