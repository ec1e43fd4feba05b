"""Shared inputs of the CLI tests: the fastest real `train` arguments, a tiny ImageFolder (so a run
evaluates 2 held-out images, not 80), and a runner that returns the one error line."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from pretexts.cli import main
from pretexts.engine.data.datasets import SAMPLE_DIR

# A 0.2M-parameter ConvNeXt: LayerNorm, so a batch of 8 is fine, and among timm's fastest double backward.
TRAIN = ["train", "--backbone", "test_convnext", "--batch-size", "8"]
ONE_STEP = [*TRAIN, "--epochs", "1", "--max-steps-per-epoch", "1", "--workers", "0"]  # one epoch of one step


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from a second thread, and on a shared CPU two OpenMP threads were seen
    waiting on each other 20x longer than the work takes (a depthwise conv's backward). Put back after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_cli(args: list) -> tuple:
    """(click's result, the 'Error: ...' line or '')."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    return result, errors[0] if errors else ""


def fails_cleanly(args, *expected) -> str:
    """Runs `args`: one `Error:` line holding each of `expected`, exit code 2, no traceback; returns the line."""
    result, error = run_cli(args)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert sum(line.startswith("Error:") for line in result.output.splitlines()) == 1, result.output
    for text in expected:
        assert text in error, error
    return error


def copy_sample_images(folder: Path, count: int, classes=("a", "b"), split: str = "train") -> Path:
    """`count` embedded CIFAR-10 images per class, copied into folder/<class>/."""
    for cls in classes:
        (folder / cls).mkdir(parents=True, exist_ok=True)
        for path in sorted((SAMPLE_DIR / split).glob("*/*.png"))[:count]:
            shutil.copy(path, folder / cls / f"{path.parent.name}_{path.name}")
    return folder


def tiny_image_folder(root: Path) -> Path:
    """32 training images (4 batches of 8) and 2 held-out ones."""
    copy_sample_images(root / "train", 16)
    copy_sample_images(root / "val", 1, split="val")
    return root


def start_pretexts(args: list, threads: int) -> subprocess.Popen:
    """`python -m pretexts ARGS` in a process of its own session (a signal to its group reaches its loader workers),
    on `threads` torch threads, its output captured as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "pretexts", *map(str, args)],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
    )
