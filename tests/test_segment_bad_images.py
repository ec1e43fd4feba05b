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
