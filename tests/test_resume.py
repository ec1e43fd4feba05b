"""Checkpoints: resume gives the same weights as an uninterrupted run; bad checkpoints are named."""

import json
from pathlib import Path

import pytest
import torch

from pretexts.engine import PretrainConfig, Pretrainer, atomic_save, load_checkpoint
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.errors import CheckpointError


def config(out, epochs: int, backbone: str = "test_resnet", **kw) -> PretrainConfig:
    kw.setdefault("monitor_every", 0)  # the monitor has tests of its own (test_monitor.py)
    return PretrainConfig(
        backbone=backbone,
        data="sample",
        epochs=epochs,
        batch_size=16,
        workers=0,
        max_steps_per_epoch=2,
        out=str(out),
        base_lr=1e-3,
        eval_images=16,
        figure_images=2,
        task_args=kw.pop("task_args", {}),
        **kw,
    )


def weights(path) -> dict:
    return load_checkpoint(path)["model"]


class KilledAfterFirstEpoch(Pretrainer):
    """Dies as the second epoch starts, after the first epoch's checkpoint, with a step half logged."""

    def train_epoch(self):
        if self.epoch == 1:
            with open(self.out / "log.jsonl", "a") as log:
                log.write('{"step": 99, "loss": 1.0}\n')
            raise KeyboardInterrupt
        super().train_epoch()


def assert_resume_is_exact(config) -> None:
    """`config(name, **extra)` gives a 2-epoch run in folder `name`: one run straight through, one killed after
    its first epoch and resumed, must end on the same weights."""
    straight, split = config("straight"), config("split")
    Pretrainer(straight).run()
    with pytest.raises(KeyboardInterrupt):
        KilledAfterFirstEpoch(split).run()
    Pretrainer(config("split", resume="auto")).run()
    a, b = (weights(Path(run.out) / "checkpoint.pt") for run in (straight, split))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_two_epochs_equal_one_epoch_resume_one_epoch(tmp_path):
    assert_resume_is_exact(lambda name, **extra: config(tmp_path / name, 2, **extra))
    lines = (tmp_path / "split/log.jsonl").read_text().splitlines()
    assert len(lines) == 4  # 2 epochs x 2 steps, none repeated


def test_run_writes_checkpoint_log_figures_and_results(tmp_path):
    results = Pretrainer(config(tmp_path, 1)).run()
    for name in [
        "checkpoint.pt",
        "log.jsonl",
        "restoration_epoch001.png",
        "loss_curve.png",
        "results.json",
        "config.json",
    ]:
        assert (tmp_path / name).stat().st_size > 0, name
    held = results["held_out"]
    assert held["images"] == 16 and len(held["restored_mse"]) == 2 and held["corrupted_mse"] > 0


def test_runs_record_their_arithmetic_and_a_resume_on_other_arithmetic_says_it_is_not_exact(tmp_path, capsys):
    results = Pretrainer(config(tmp_path, 1)).run()
    threads = torch.get_num_threads()
    expected = {
        "torch": str(torch.__version__),
        "processes": 1,
        "threads": threads,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device": "cpu",
        "precision": "fp32",
    }
    assert results["arithmetic"] == expected
    assert json.loads((tmp_path / "results.json").read_text())["arithmetic"] == expected
    assert load_checkpoint(tmp_path / "checkpoint.pt")["arithmetic"] == expected
    capsys.readouterr()

    Pretrainer(config(tmp_path, 2, resume="auto")).run()  # the same arithmetic: an exact resume, nothing said
    assert "other arithmetic" not in capsys.readouterr().err

    # written on another thread count (as if: running one here would oversubscribe the test's core)
    ckpt = load_checkpoint(tmp_path / "checkpoint.pt")
    save_checkpoint({**ckpt, "arithmetic": {**expected, "threads": threads + 1}}, tmp_path / "checkpoint.pt")
    results = Pretrainer(config(tmp_path, 3, resume="auto")).run()
    err = capsys.readouterr().err
    assert f"threads {threads + 1} -> {threads}" in err and "bit for bit" in err and "checkpoint.pt" in err
    assert results["optimizer_steps"] == 6 and results["arithmetic"]["threads"] == threads


def test_resume_with_another_backbone_is_refused(tmp_path):
    Pretrainer(config(tmp_path, 1)).run()
    cfg = config(tmp_path, 2, resume="auto")
    cfg.backbone = "vit_tiny"
    with pytest.raises(CheckpointError, match="backbone='test_resnet'"):
        Pretrainer(cfg).run()


def test_missing_and_truncated_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    atomic_save({"model": {}, "config": {}, "format_version": 1}, tmp_path / "ok.pt")
    data = (tmp_path / "ok.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(tmp_path / "cut.pt")
    assert not list(tmp_path.glob(".*.tmp")), "atomic_save leaves no temporary file behind"


def test_a_checkpoint_records_its_scaled_task_parameters_and_a_resume_checks_them(tmp_path, capsys):

    mixed = {"tasks": "gridded-mask,super-resolution:scale=4,denoising"}
    Pretrainer(config(tmp_path, 1, task="mixed", task_args=mixed, monitor_every=0)).run()
    path = tmp_path / "checkpoint.pt"
    ckpt = load_checkpoint(path)
    assert ckpt["task_sizes"] == {"0:gridded-mask": {"grid": 2}}  # the paper's 16 at 224 px is 2 at 32 px
    # a scaling rule that has changed since: refused, naming both
    save_checkpoint({**ckpt, "task_sizes": {"0:gridded-mask": {"grid": 16}}}, path)
    with pytest.raises(
        CheckpointError,
        match=r"scaled parameters \{'0:gridded-mask': \{'grid': 16\}\}.*resolves them "
        r"to \{'0:gridded-mask': \{'grid': 2\}\} at 32 px",
    ):
        Pretrainer(config(tmp_path, 2, task="mixed", task_args=mixed, monitor_every=0, resume="auto")).run()
