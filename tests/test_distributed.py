"""`torchrun --nproc-per-node 2 -m pretexts train` (gloo, CPU) equals one process with the same global batch.

Colorization is deterministic per image and convnext_atto has no BatchNorm, so two ranks of 4 images
and one process of 8 compute the same mean loss, and DDP's averaged gradient is its gradient.
"""
import json
import os
import subprocess
import sys

import torch

from pretexts.engine import PretrainConfig, Pretrainer, load_checkpoint

SETTINGS = {"backbone": "convnext_atto", "task": "colorization", "data": "sample", "batch_size": 8,
            "max_steps_per_epoch": 2, "workers": 0, "warmup_epochs": 0.0, "lr": 1e-3}


def torchrun(out, epochs: int, *extra: str) -> None:
    options = [f"--{key.replace('_', '-')}={value}" for key, value in SETTINGS.items()]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "pretexts", "train", *options, f"--epochs={epochs}", f"--out={out}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("pretraining convnext_atto") == 1, "only rank 0 prints"


def one_process(out, epochs: int, **extra) -> None:
    Pretrainer(PretrainConfig(**SETTINGS, epochs=epochs, out=str(out), **extra)).run()


def test_two_ranks_equal_one_process_through_both_grad_modes_and_a_resume(tmp_path):
    # epoch 1 in finite-difference mode, then a resumed epoch 2 in the exact mode (double backward): the gradient
    # mode is one of the settings a resumed run may change
    torchrun(tmp_path / "ddp", 1, "--grad-mode=finite-difference")
    torchrun(tmp_path / "ddp", 2, "--resume", "--grad-mode=exact")
    one_process(tmp_path / "single", 1, method_args={"grad_mode": "finite-difference"})
    one_process(tmp_path / "single", 2, resume="auto")

    ddp, single = load_checkpoint(tmp_path / "ddp/checkpoint.pt"), load_checkpoint(tmp_path / "single/checkpoint.pt")
    assert ddp["global_step"] == single["global_step"] == 4
    start = Pretrainer(PretrainConfig(**SETTINGS, out=str(tmp_path / "init"))).model.state_dict()
    moved = 0
    for key, value in single["model"].items():
        torch.testing.assert_close(ddp["model"][key], value, rtol=1e-4, atol=2e-6, msg=key)
        moved += not torch.equal(value, start[key])
    assert moved > 10, "the weights must have trained"

    logs = [[json.loads(line) for line in (tmp_path / run / "log.jsonl").read_text().splitlines()]
            for run in ("ddp", "single")]
    assert [r["step"] for r in logs[0]] == [1, 2, 3, 4], "rank 0 alone writes the log, once per step"
    for ddp_row, single_row in zip(*logs):  # the logged loss is the global batch's
        assert abs(ddp_row["loss"] - single_row["loss"]) <= 1e-5 * single_row["loss"]
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == \
        sorted(p.name for p in (tmp_path / "single").iterdir())


def test_finetune_under_torchrun_refuses_in_one_line(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "pretexts", "finetune", "--from-scratch", "--backbone", "convnext_atto", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: `pretexts finetune` runs in one process; start it without torchrun (`pretexts train` "
                      "is the data-parallel command)."]
    assert not (tmp_path / "log.jsonl").exists()
