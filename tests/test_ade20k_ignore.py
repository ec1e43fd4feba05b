"""An ADE20K-layout folder reads 255 as ignore, as mmsegmentation's reduce_zero_label does: data converted into that
layout often marks borders 255, which used to become label 254 and refuse the run with a hint that could not help."""

import numpy as np
from cli_runs import one_torch_thread  # noqa: F401 (autouse)
from PIL import Image

from pretexts.engine.evaluation.segmentation.data import SegmentationFolder
from pretexts.engine.evaluation.segmentation.metrics import IGNORE


def ade20k_folder(root, mask: np.ndarray):
    for split in ("training", "validation"):
        for sub in ("images", "annotations"):
            (root / sub / split).mkdir(parents=True)
        Image.fromarray(np.zeros((*mask.shape, 3), np.uint8)).save(root / "images" / split / "a.jpg")
        Image.fromarray(mask).save(root / "annotations" / split / "a.png")
    return root


def reduce_zero_label(mask: np.ndarray) -> np.ndarray:
    """mmsegmentation's LoadAnnotations with reduce_zero_label, on a uint8 mask."""
    out = mask.copy()
    out[out == 0] = 255
    out = out - 1
    out[out == 254] = 255
    return out


def test_ade20k_reads_0_and_255_as_ignore_as_mmsegmentation(tmp_path):
    stored = np.array([[0, 1, 150], [255, 2, 3]], np.uint8).repeat(4, 0).repeat(4, 1)
    root = ade20k_folder(tmp_path, stored)
    for split, train in (("validation", False), ("training", True)):
        data = SegmentationFolder(root, split, 8, train)
        assert data.num_classes == 150
        _, mask = data[0]
        if not train:  # the label map as stored, scored at its size
            assert np.array_equal(mask.numpy(), reduce_zero_label(stored).astype(np.int64))
        assert set(mask.unique().tolist()) <= {IGNORE, 0, 1, 2, 149}
