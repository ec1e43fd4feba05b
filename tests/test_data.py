"""Data sources and the loader: uint8 on the host, float [0,1] on the device, seeded augmentation."""

import pytest
import torch

from pretexts.engine.data.datasets import SAMPLE_DIR, build_source
from pretexts.engine.data.loader import AugmentedImages, EpochSampler, make_loader, pretrain_transform, to_device
from pretexts.errors import DataError


def test_embedded_sample_has_real_train_and_val_images():
    assert len(build_source("sample", "train")) == 320
    assert len(build_source("sample", "val")) == 80
    size = sum(p.stat().st_size for p in SAMPLE_DIR.rglob("*.png"))
    assert size < 2_000_000


def test_loader_gives_uint8_then_float_on_device():
    data = AugmentedImages(build_source("sample", "train"), pretrain_transform(24))
    images, labels = next(iter(make_loader(data, 8, EpochSampler(data), workers=0)))
    assert images.dtype == torch.uint8 and images.shape == (8, 24, 24, 3)
    x = to_device(images, torch.device("cpu"))
    assert x.shape == (8, 3, 24, 24) and 0 <= x.min() and x.max() <= 1 and x.dtype == torch.float32


def test_augmentation_is_fixed_by_seed_epoch_and_index():
    data = AugmentedImages(build_source("sample", "train"), pretrain_transform(32), seed=3)
    assert torch.equal(data[(1, 5)][0], data[(1, 5)][0])
    assert not torch.equal(data[(1, 5)][0], data[(2, 5)][0])


def test_sampler_resumes_part_way_and_shards_across_ranks():
    data = list(range(100))
    full = list(EpochSampler(data, seed=1))
    resumed = EpochSampler(data, seed=1)
    resumed.set_position(0, 30)
    assert list(resumed) == full[30:]
    ranks = [list(EpochSampler(data, num_replicas=2, rank=r, seed=1)) for r in range(2)]
    assert sorted(i for _, i in ranks[0] + ranks[1]) == sorted(i for _, i in full)


def test_image_folder_with_and_without_val(tmp_path):
    from PIL import Image

    for split in ["train", "val"]:
        for cls in ["a", "b"]:
            (tmp_path / "tv" / split / cls).mkdir(parents=True)
            (tmp_path / "flat" / cls).mkdir(parents=True, exist_ok=True)
            for i in range(10):
                Image.new("RGB", (40, 30), (i * 20, 0, 0)).save(tmp_path / "tv" / split / cls / f"{i}.png")
                Image.new("RGB", (40, 30)).save(tmp_path / "flat" / cls / f"{split}{i}.png")
    assert len(build_source(str(tmp_path / "tv"), "val")) == 20
    train, val = build_source(str(tmp_path / "flat"), "train"), build_source(str(tmp_path / "flat"), "val")
    assert len(train) + len(val) == 40 and len(val) == 2


def test_missing_and_empty_data_paths_are_clear_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        build_source(str(tmp_path / "nope"), "train")
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(DataError, match="no images found"):
        build_source(str(tmp_path / "empty"), "train")


def test_a_flat_folder_of_unlabelled_images_pretrains(tmp_path):
    """No class folders: pretraining needs no labels, so the images are one class and 5 % are held out."""
    from cli_runs import TRAIN, copy_sample_images, run_cli

    flat = tmp_path / "photos"
    copy_sample_images(tmp_path / "tmp", 20, classes=("x",))
    flat.mkdir()
    for path in (tmp_path / "tmp" / "x").iterdir():
        path.rename(flat / path.name)
    (flat / "notes.txt").write_text("not an image")
    train, val = build_source(str(flat), "train"), build_source(str(flat), "val")
    assert len(train) == 19 and len(val) == 1
    result, error = run_cli(
        [
            *TRAIN,
            "--epochs",
            "1",
            "--max-steps-per-epoch",
            "1",
            "--workers",
            "0",
            "--data",
            flat,
            "--out",
            tmp_path / "run",
        ]
    )
    assert result.exit_code == 0, error or result.output
    assert "held-out restoration MSE on 1 image:" in result.output


def write_mnist(root, count: int = 24) -> None:
    """torchvision's MNIST files (idx format) with `count` real CIFAR images in gray, for both splits."""
    import struct

    import numpy as np
    from PIL import Image

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    paths = sorted((SAMPLE_DIR / "train").glob("*/*.png"))[:count]
    pixels = np.stack([np.asarray(Image.open(p).convert("L").resize((28, 28))) for p in paths])
    for prefix in ("train", "t10k"):
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, count, 28, 28) + pixels.tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 2049, count) + bytes(i % 10 for i in range(count))
        )


def test_a_timm_dataset_name_reads_its_files_from_data_and_resumes_exactly(tmp_path):
    from test_resume import assert_resume_is_exact

    from pretexts.engine import PretrainConfig

    write_mnist(tmp_path / "mnist")
    source = build_source(str(tmp_path / "mnist"), "train", dataset="torch/mnist")
    assert len(source) == 24 and source[3][1] == 3

    def config(out, **extra):
        return PretrainConfig(
            backbone="test_convnext",
            dataset="torch/mnist",
            data=str(tmp_path / "mnist"),
            batch_size=8,
            epochs=2,
            max_steps_per_epoch=1,
            workers=0,
            eval_images=8,
            out=str(tmp_path / out),
            **extra,
        )

    assert_resume_is_exact(config)


def test_streaming_and_missing_timm_datasets_are_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="streaming reader"):
        build_source(str(tmp_path), "train", dataset="wds/imagenet")
    with pytest.raises(DataError, match="cannot be read from .*nothing is downloaded"):
        build_source(str(tmp_path), "train", dataset="torch/cifar100")
