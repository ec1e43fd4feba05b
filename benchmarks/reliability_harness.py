"""The harness of benchmarks/reliability.py: the `pretexts` CLI run in-process, what counts as a clean refusal,
and the runs and broken or hostile inputs every part of the measurement starts from."""

import os
import pickle
import shutil
from pathlib import Path

import torch
from click.testing import CliRunner

from pretexts.cli import main
from pretexts.engine.data.datasets import SAMPLE_DIR
from pretexts.engine.training.checkpoint import save_checkpoint

TRAIN = ["train", "--backbone", "test_convnext", "--batch-size", "8", "--workers", "0"]
STEPPING = TRAIN + ["--max-steps-per-epoch", "1", "--eval-images", "4", "--figure-images", "2"]
ONE_STEP = STEPPING + ["--epochs", "1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def cli(args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def clean_refusal(args) -> tuple[bool, str]:
    code, output = cli(args)
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    ok = code == 2 and len(errors) == 1 and "Traceback" not in output
    return ok, errors[0] if errors else output.strip().splitlines()[-1:] and output.strip().splitlines()[-1]


def fixtures(work: Path) -> dict:
    """A pretraining run, a fine-tuning run, a segmentation run, and broken or hostile inputs made from them."""
    f = {"work": work}
    data = work / "data"
    for cls in ("a", "b"):
        (data / cls).mkdir(parents=True)
        for path in sorted((SAMPLE_DIR / "train").glob("*/*.png"))[:10]:
            shutil.copy(path, data / cls / f"{path.parent.name}_{path.name}")
    f["data"] = data
    assert cli([*ONE_STEP, "--data", data, "--out", work / "pre"])[0] == 0
    f["pre"] = work / "pre" / "checkpoint.pt"
    assert (
        cli(
            [
                "finetune",
                "--checkpoint",
                f["pre"],
                "--data",
                data,
                "--epochs",
                "1",
                "--max-steps-per-epoch",
                "1",
                "--batch-size",
                "8",
                "--workers",
                "0",
                "--randaug",
                "none",
                "--mixup",
                "0",
                "--cutmix",
                "0",
                "--out",
                work / "ft",
            ]
        )[0]
        == 0
    )
    f["ft"] = work / "ft" / "checkpoint.pt"
    assert (
        cli(
            [
                "segment",
                "--from-scratch",
                "--backbone",
                "resnet18",
                "--img-size",
                "32",
                "--data",
                "generated",
                "--max-steps",
                "1",
                "--head",
                "linear",
                "--out",
                work / "seg",
            ]
        )[0]
        == 0
    )
    f["seg"] = work / "seg" / "segmenter.pt"
    raw = f["pre"].read_bytes()
    ckpt = torch.load(f["pre"], weights_only=True)
    flipped = bytearray(raw)
    at = raw.index(b"data/0") + 200  # inside the zip's first tensor record
    flipped[at] ^= 0xFF
    (work / "flipped.pt").write_bytes(bytes(flipped))
    f["flipped"] = work / "flipped.pt"
    save_checkpoint({**ckpt, "config": {}}, work / "empty-config.pt")
    f["empty_config"] = work / "empty-config.pt"
    resnet = torch.load(work / "seg" / "segmenter.pt", weights_only=True)
    save_checkpoint(
        {**ckpt, "model": {k.replace("features.backbone.", "backbone."): v for k, v in resnet["model"].items()}},
        work / "wrong-shapes.pt",
    )
    f["wrong_shapes"] = work / "wrong-shapes.pt"
    cifar = work / "cifar" / "cifar-10-batches-py"
    cifar.mkdir(parents=True)
    (cifar / "data_batch_1").write_bytes(pickle.dumps({"data": [1, 2]})[:10])
    f["cifar"] = work / "cifar"
    loop = work / "loop"
    (loop / "x").mkdir(parents=True)
    for path in sorted((SAMPLE_DIR / "train").glob("*/*.png"))[:10]:
        shutil.copy(path, loop / "x" / path.name)
    (loop / "x" / "again").symlink_to(loop / "x")
    f["loop"] = loop
    (work / "three-betas.yaml").write_text("betas: [0.9, 0.95, 0.99]\n")
    f["three_betas"] = work / "three-betas.yaml"
    (work / "a-file").write_text("not a folder")
    f["file"] = work / "a-file"
    return f
