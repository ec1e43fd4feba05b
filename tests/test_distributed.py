"""`torchrun --nproc-per-node 2 -m pretexts train|finetune|probe|segment` (gloo, CPU) equals one process with the
same global batch.

Colorization is deterministic per image and convnext_atto has no BatchNorm, so two ranks of 4 images
and one process of 8 compute the same mean loss, and DDP's averaged gradient is its gradient.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pretexts.engine import PretrainConfig, Pretrainer, load_checkpoint
from pretexts.engine.data.loader import EpochSampler
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.engine.evaluation.segmentation.data import SegmentationFolder
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.evaluation.segmentation.heads import Segmenter
from pretexts.engine.evaluation.segmentation.train import evaluate

SETTINGS = {
    "backbone": "convnext_atto",
    "task": "colorization",
    "data": "sample",
    "batch_size": 8,
    "max_steps_per_epoch": 2,
    "workers": 0,
    "warmup_epochs": 0.0,
    "lr": 1e-3,
}


def torchrun(out, epochs: int, *extra: str) -> None:
    options = [f"--{key.replace('_', '-')}={value}" for key, value in SETTINGS.items()]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "pretexts",
        "train",
        *options,
        f"--epochs={epochs}",
        f"--out={out}",
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("pretraining convnext_atto") == 1, "only rank 0 prints"


def one_process(out, epochs: int, **extra) -> None:
    Pretrainer(PretrainConfig(**SETTINGS, epochs=epochs, out=str(out), **extra)).run()


@pytest.mark.slow
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
    assert_trained_alike(tmp_path / "ddp", tmp_path / "single", start, steps=4)
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == sorted(
        p.name for p in (tmp_path / "single").iterdir()
    )


def assert_trained_alike(ranks, single, start: dict, steps: int) -> None:
    """The run in folder `ranks` (several processes) ended on the weights of the one-process run in `single`, within
    the tolerance of gradients summed in another order; both trained (weights moved from `start`); rank 0 alone
    logged each of the `steps` steps, with the global batch's loss."""
    ranks_ckpt, single_ckpt = (
        load_checkpoint(Path(ranks) / "checkpoint.pt"),
        load_checkpoint(Path(single) / "checkpoint.pt"),
    )
    moved = 0
    for key, value in single_ckpt["model"].items():
        torch.testing.assert_close(ranks_ckpt["model"][key], value, rtol=1e-4, atol=2e-6, msg=key)
        moved += not torch.equal(value, start[key])
    assert moved > 10, "the weights must have trained"
    logs = [
        [json.loads(line) for line in (Path(run) / "log.jsonl").read_text().splitlines()] for run in (ranks, single)
    ]
    assert [r["step"] for r in logs[0]] == list(range(1, steps + 1)), "rank 0 alone writes the log, once per step"
    for ranks_row, single_row in zip(*logs):  # the logged loss is the global batch's
        assert abs(ranks_row["loss"] - single_row["loss"]) <= 1e-5 * single_row["loss"]


def launch(command: str, out, *options: str, processes: int = 2) -> str:
    """`pretexts COMMAND` under torchrun with `processes` ranks on gloo, or in one process with `processes=1`;
    its stdout."""
    runner = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]
        if processes > 1
        else [sys.executable]
    )
    command = [*runner, "-m", "pretexts", command, *options, f"--out={out}"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def assert_same_weights(a, b, start=None, key="model") -> None:
    """Equal within float tolerance, and moved from the start (so the equality is not two untrained copies). The
    ranks' gradients are summed in another order; AdamW's first steps (about lr = 1e-3 per weight) turn a rounding
    difference in a near-zero gradient into up to a few percent of one step, so atol is 5e-5, well under one step."""
    moved = 0
    for name, value in b[key].items():
        torch.testing.assert_close(a[key][name], value, rtol=1e-4, atol=5e-5, msg=name)
        if start is None:
            continue
        moved += value.is_floating_point() and not torch.equal(value, start[name])
    assert start is None or moved > 10, "the weights must have trained"


def both(command: str, tmp_path, *options: str) -> list[dict]:
    """results.json of two ranks and of one process; rank 0 alone prints and writes the same files."""
    outputs = [launch(command, tmp_path / name, *options, processes=n) for name, n in (("ddp", 2), ("single", 1))]
    assert len(outputs[0].splitlines()) == len(outputs[1].splitlines()), "rank 0 alone speaks"
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == sorted(
        p.name for p in (tmp_path / "single").iterdir()
    )
    return [json.loads((tmp_path / name / "results.json").read_text()) for name in ("ddp", "single")]


@pytest.mark.slow
def test_finetune_on_two_ranks_takes_one_process_steps(tmp_path):
    # RandAugment and the crops are seeded per image, so they stay on; mixup/cutmix mix within a rank's share and
    # drop-path draws per rank, so they are off; two micro-batches a step (DDP's no_sync crashed under static_graph)
    ddp, single = both(
        "finetune",
        tmp_path,
        "--from-scratch",
        "--backbone=convnext_atto",
        "--data=sample",
        "--batch-size=8",
        "--accum-iter=2",
        "--epochs=2",
        "--max-steps-per-epoch=2",
        "--warmup-epochs=0",
        "--workers=0",
        "--mixup=0",
        "--cutmix=0",
        "--drop-path=0",
        "--lr=1e-3",
    )
    assert (ddp["processes"], single["processes"]) == (2, 1)
    assert ddp["optimizer_steps"] == single["optimizer_steps"] == 4
    assert ddp["top1"] == pytest.approx(single["top1"], abs=1e-9), "validation is split over ranks and summed"
    torch.manual_seed(0)  # the runs' seed: their starting weights
    start = create_classifier(None, "convnext_atto", 32, num_classes=10)[0].state_dict()
    assert_same_weights(
        load_checkpoint(tmp_path / "ddp/finetuned.pt"), load_checkpoint(tmp_path / "single/finetuned.pt"), start
    )
    logs = [
        [json.loads(line) for line in (tmp_path / run / "log.jsonl").read_text().splitlines()]
        for run in ("ddp", "single")
    ]
    assert [row["loss"] for row in logs[0]] == pytest.approx([row["loss"] for row in logs[1]], rel=1e-5)


@pytest.mark.slow
def test_probe_on_two_ranks_gathers_every_feature(tmp_path):
    ddp, single = both(
        "probe",
        tmp_path,
        "--from-scratch",
        "--backbone=convnext_atto",
        "--data=sample",
        "--workers=0",
        "--epochs=5",
        "--probe=linear",
        "--probe=knn",
    )
    assert (ddp["processes"], single["processes"]) == (2, 1)
    assert (ddp["train_images"], ddp["val_images"]) == (single["train_images"], single["val_images"]) == (320, 80)
    # the features come back in the dataset's order, so the kNN votes and the head's training are the same
    assert ddp["knn"] == pytest.approx(single["knn"])
    assert ddp["linear"]["top1"] == pytest.approx(single["linear"]["top1"], abs=1e-9)


@pytest.mark.slow
def test_segment_on_two_ranks_scores_every_validation_image_once(tmp_path):
    # PyTorch's SyncBatchNorm runs on GPUs only, and the heads hold BatchNorm: on gloo each rank normalises over its
    # own 4 crops, so the weights are not one process's; what must be exact is the data and the scoring
    options = (
        "--from-scratch",
        "--backbone=convnext_atto",
        "--data=generated",
        "--batch-size=8",
        "--epochs=2",
        "--max-steps=4",
        "--head=linear",
        "--workers=0",
    )
    stdout = launch("segment", tmp_path / "ddp", *options)
    assert stdout.count("mIoU") == 1, "rank 0 alone speaks"
    ddp = json.loads((tmp_path / "ddp/results.json").read_text())
    assert (ddp["processes"], ddp["steps"]) == (2, 4)
    assert json.loads((tmp_path / "ddp/log.jsonl").read_text().splitlines()[-1])["step"] == 4
    # the ranks' confusion matrices are summed: the mIoU reported equals one process scoring the saved weights
    data = write_generated(tmp_path / "generated")  # the seeded set each rank wrote for itself
    model = Segmenter(create_classifier(None, "convnext_atto", 32)[0], "linear", ddp["num_classes"], 32)
    model.load_state_dict(load_checkpoint(tmp_path / "ddp/segmenter.pt")["model"])
    val = SegmentationFolder(data, "validation", 32, False, ddp["num_classes"])
    alone = evaluate(model, torch.utils.data.DataLoader(val, 8), ddp["num_classes"], 32, "whole", torch.device("cpu"))
    assert ddp["val_images"] == len(val)
    assert ddp["miou_percent"] == pytest.approx(alone["miou_percent"], abs=1e-9)
    assert ddp["pixel_acc_percent"] == pytest.approx(alone["pixel_acc_percent"], abs=1e-9)


def test_each_rank_takes_its_share_of_one_process_batches():
    """The sampler behind finetune and segment: the ranks' batches together are one process's batch, each image once."""

    class Indices(torch.utils.data.Dataset):  # an EpochSampler yields (epoch, index) keys
        __len__, __getitem__ = (lambda self: 37), (lambda self, key: key[1])

    dataset = Indices()
    single = [
        list(b)
        for b in torch.utils.data.DataLoader(dataset, 8, sampler=EpochSampler(dataset, 1, 0, seed=3), drop_last=True)
    ]
    ranks = [
        [
            list(b)
            for b in torch.utils.data.DataLoader(
                dataset, 4, sampler=EpochSampler(dataset, 2, r, seed=3), drop_last=True
            )
        ]
        for r in (0, 1)
    ]
    assert len(ranks[0]) == len(ranks[1]) == len(single) == 4
    for batch, (zero, one) in zip(single, zip(*ranks)):
        assert sorted(zero + one) == sorted(batch)


def test_commands_that_stay_in_one_process_say_so_under_torchrun(tmp_path):
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "pretexts",
        "compare",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [
        "Error: `pretexts compare` runs in one process; start it without torchrun (train, finetune, "
        "probe and segment are the data-parallel commands)."
    ]
