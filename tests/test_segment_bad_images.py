"""Bad segmentation data ends in one DataError naming the file or folder and the fix, never a PIL traceback."""

import shutil

import numpy as np
import pytest
from PIL import Image

from pretexts.backbones.normalisation import IMAGENET_MEAN, IMAGENET_STD
from pretexts.cli import user_message
from pretexts.engine.evaluation.segmentation.data import SegmentationFolder, layout
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.errors import DataError


@pytest.fixture
def root(tmp_path):
    return write_generated(tmp_path / "d", 4, 1, 16)


def test_an_unreadable_image_names_its_path_and_the_fix(root):
    bad = root / "images/training/00003.png"
    bad.write_text("junk\n")
    data = SegmentationFolder(root, "training", 16, False, num_classes=5)
    data[0]  # the others still read
    with pytest.raises(DataError) as caught:
        data[3]
    message = str(caught.value)
    assert f"image '{bad}' is unreadable" in message and "replace it" in message
    assert user_message(caught.value) == message  # one line, as the CLI prints it


def test_a_truncated_image_is_unreadable_too(root):
    bad = root / "images/training/00001.png"
    bad.write_bytes(bad.read_bytes()[:60])  # a valid header, the pixel data cut off
    with pytest.raises(DataError, match="image '.*00001.png' is unreadable"):
        SegmentationFolder(root, "training", 16, True, num_classes=5)[(0, 1)]


def test_an_unreadable_mask_names_its_path_also_when_classes_are_inferred(root):
    bad = root / "masks/training/00002.png"
    bad.write_text("junk\n")
    with pytest.raises(DataError, match=f"mask '{bad}' is unreadable .*remove it and its image"):
        SegmentationFolder(root, "training", 16, False)  # reads every mask to count the classes
    with pytest.raises(DataError, match=f"mask '{bad}' is unreadable"):
        SegmentationFolder(root, "training", 16, False, num_classes=5)[2]


def test_a_flat_folder_is_told_the_subfolders_it_needs(root):
    for sub in ("images", "masks"):
        for split in ("training", "validation"):
            for f in (root / sub / split).iterdir():
                f.rename(root / sub / f"{split}-{f.name}")
            (root / sub / split).rmdir()
    with pytest.raises(DataError) as caught:
        SegmentationFolder(root, "training", 16, True)
    message = str(caught.value)
    assert f"no images in '{root / 'images' / 'training'}'" in message
    assert "images/training/ and images/validation/" in message and "masks/training/ and masks/validation/" in message
    assert "holds its images directly" in message


def test_an_empty_split_of_ade20k_names_annotations(root):
    shutil.move(root / "masks", root / "annotations")
    shutil.rmtree(root / "images/validation")
    with pytest.raises(DataError, match="annotations/training/ and annotations/validation/") as caught:
        SegmentationFolder(root, "validation", 16, False)
    assert "directly" not in str(caught.value)


def test_a_folder_of_neither_layout_says_what_to_give(tmp_path):
    with pytest.raises(DataError) as caught:
        layout(tmp_path)
    message = str(caught.value)
    assert "neither ADE20K" in message and "training/ and validation/" in message
    assert "or --data generated" in message and "write a set" not in message


def test_a_readable_image_is_read_as_before(root):
    image, _ = SegmentationFolder(root, "training", 16, False, num_classes=5)[0]  # 16 px: the resize keeps it
    pixels = np.asarray(Image.open(root / "images/training/00000.png").convert("RGB")) / 255
    expected = (pixels - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    assert np.allclose(image.permute(1, 2, 0).numpy(), expected, atol=1e-4)


def test_255_in_generic_masks_is_ignored_not_counted_as_a_class(root):
    """VOC-style masks (labels 0..2, a 255 border) learned 256 classes, 253 of them phantoms (mIoU near 0)."""
    for path in (root / "masks/training").iterdir():
        labels = np.asarray(Image.open(path)) % 3
        labels[0, :] = 255
        Image.fromarray(labels.astype(np.uint8)).save(path)
    data = SegmentationFolder(root, "training", 16, False)
    assert data.num_classes == 3 and data.classes_from == "inferred"


def test_a_16_bit_image_is_scaled_as_pretraining_reads_it_not_clipped_to_white(root):
    from pretexts.engine.data.image_check import load_rgb
    from pretexts.engine.evaluation.segmentation.data import read_image

    path = root / "images/training/00000.png"
    ramp = (np.arange(16 * 16).reshape(16, 16) * 257).astype(np.uint16)  # 0..65535 in steps of 257
    Image.fromarray(ramp).save(path)
    read = np.asarray(read_image(path))
    assert np.array_equal(read, np.asarray(load_rgb(str(path)))) and read.mean() == pytest.approx(127.5, abs=0.5)


def test_segment_says_what_it_reads_and_where_its_class_count_comes_from(tmp_path):
    from cli_runs import run_cli

    args = ["segment", "--from-scratch", "--backbone", "test_convnext", "--data", "generated", "--max-steps", "1"]
    result, _ = run_cli([*args, "--batch-size", "4", "--workers", "0", "--out", tmp_path / "s"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("segmenting"))
    assert "training, " in line and "validation images" in line and "255 ignored; --num-classes to set it" in line


def test_a_16_bit_mask_with_65535_as_ignore_is_refused_naming_it(root):
    """65535 as a 16-bit mask's "ignore" asked for 65,536 classes: a 4e9-cell confusion matrix, then out of memory."""
    bad = root / "masks/training/00001.png"
    labels = np.asarray(Image.open(bad)).astype(np.uint16) % 3
    labels[0, :] = 65535
    Image.fromarray(labels).save(bad)
    with pytest.raises(DataError) as caught:
        SegmentationFolder(root, "training", 16, False)
    message = str(caught.value)
    assert f"mask '{bad}' has label 65535" in message and "65536 classes" in message
    assert "write them as 255" in message and "--num-classes" in message
    assert SegmentationFolder(root, "training", 16, False, num_classes=65536).num_classes == 65536  # as asked
