"""`pretexts probe` under torchrun with a split of fewer images than processes: the rank with no image sends an empty
share, and every rank gets the one process's features back."""

import json
import os
import subprocess
import sys

import pytest
from cli_runs import copy_sample_images


def probe(data, out, processes: int) -> dict:
    """results.json of `pretexts probe` (kNN and the linear head, from scratch) in `processes` processes."""
    runner = (
        ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)] if processes > 1 else []
    )
    options = ["--from-scratch", "--backbone=test_convnext", f"--data={data}", "--workers=0", "--quiet"]
    options += ["--probe=knn", "--knn-k=3", "--probe=linear", "--epochs=2", f"--out={out}"]
    done = subprocess.run(
        [sys.executable, *runner, "-m", "pretexts", "probe", *options],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_probe_on_two_ranks_with_one_validation_image(tmp_path):
    data = tmp_path / "data"
    copy_sample_images(data / "train", 8)
    copy_sample_images(data / "val", 1, classes=("a",), split="val")  # rank 1's share of val/ is empty
    ranks, single = probe(data, tmp_path / "ddp", 2), probe(data, tmp_path / "single", 1)
    assert (ranks["processes"], ranks["train_images"], ranks["val_images"]) == (2, 16, 1)
    assert ranks["knn"] == pytest.approx(single["knn"])
    assert ranks["linear"]["top1"] == pytest.approx(single["linear"]["top1"], abs=1e-9)
