"""Data sources and the loader: uint8 on the host, float [0,1] on the device, seeded augmentation."""
import pytest
import torch

from engine.datasets import SAMPLE_DIR, build_source
from engine.loader import AugmentedImages, EpochSampler, make_loader, pretrain_transform, to_device
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
    result, error = run_cli([*TRAIN, "--epochs", "1", "--max-steps-per-epoch", "1", "--workers", "0",
                             "--data", flat, "--out", tmp_path / "run"])
    assert result.exit_code == 0, error or result.output
    assert "held-out restoration MSE on 1 images" in result.output
