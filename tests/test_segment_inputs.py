"""What `pretexts segment` and `pretexts probe` read: 16-bit masks keep labels above 255, photos are read upright
(EXIF Orientation) as train/finetune/probe read them while masks are read as stored, and a size the backbone cannot
run at is one line before any work, as in train and finetune."""

from pathlib import Path

import numpy as np
import pytest
from cli_runs import fails_cleanly, one_torch_thread  # noqa: F401 (autouse)
from PIL import Image

from pretexts.engine.evaluation.segmentation.data import SegmentationFolder

ORIENTATION = 0x0112  # the EXIF tag; 6: stored turned 90 degrees anticlockwise, shown turned back clockwise


def folder(root: Path) -> Path:
    for split in ("training", "validation"):
        (root / "images" / split).mkdir(parents=True)
        (root / "masks" / split).mkdir(parents=True)
    return root


def sixteen_bit_masks(root: Path, labels=(3, 260)) -> Path:
    """One 32 px image per split, its 16-bit (I;16) mask: the top half labels[1], the rest labels[0]."""
    for split in ("training", "validation"):
        Image.fromarray(np.full((32, 32, 3), 128, np.uint8)).save(root / "images" / split / "a.png")
        mask = np.full((32, 32), labels[0], np.uint16)
        mask[:16] = labels[1]
        Image.fromarray(mask).save(root / "masks" / split / "a.png")
    return root


@pytest.mark.parametrize("train", [True, False])
def test_a_16_bit_mask_keeps_a_label_above_255(tmp_path, train):
    root = sixteen_bit_masks(folder(tmp_path))
    assert Image.open(root / "masks/training/a.png").mode == "I;16"
    data = SegmentationFolder(root, "training" if train else "validation", 32, train)
    assert data.num_classes == 261
    _, mask = data[(0, 0)] if train else data[0]
    assert sorted(mask.unique().tolist()) == [3, 260]  # 260 was 4 (260 % 256)
    given = SegmentationFolder(root, "validation", 32, False, num_classes=300)
    assert sorted(given[0][1].unique().tolist()) == [3, 260]


def test_a_photo_with_an_exif_orientation_is_read_upright_and_its_mask_as_stored(tmp_path):
    root = folder(tmp_path)
    upright = np.zeros((64, 40, 3), np.uint8)  # 40 wide, 64 high: red above, blue below
    upright[:32, :, 0] = upright[32:, :, 2] = 255
    stored = Image.fromarray(upright).transpose(Image.Transpose.ROTATE_90)  # 64 wide, 40 high, as the camera wrote
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    for split in ("training", "validation"):
        stored.save(root / "images" / split / "p.jpg", exif=exif, quality=95)
        mask = np.full((64, 40), 1, np.uint8)  # drawn on the upright photo: 1 on the red, 2 on the blue
        mask[32:] = 2
        Image.fromarray(mask).save(root / "masks" / split / "p.png")
    image, mask = SegmentationFolder(root, "validation", 32, False, mean=(0, 0, 0), std=(1, 1, 1))[0]
    assert tuple(mask.shape) == (64, 40)  # a stored-sideways read refused it: "mask is (64, 40), its image (40, 64)"
    red, blue = image[0], image[2]  # albumentations scales by 255 before the (0, 1) normalisation
    assert red[:14].mean() > 0.9 and blue[:14].mean() < 0.1  # the mask's 1s lie on red
    assert blue[-14:].mean() > 0.9 and red[-14:].mean() < 0.1  # its 2s on blue
    train_image, train_mask = SegmentationFolder(root, "training", 32, True, mean=(0, 0, 0), std=(1, 1, 1))[(0, 0)]
    on_red = train_image[0][train_mask == 1]
    assert on_red.numel() and on_red.mean() > 0.9  # crop and flip keep them together


def test_segment_at_a_size_the_backbone_cannot_run_is_one_line(tmp_path):
    out = tmp_path / "seg"
    args = ["segment", "--from-scratch", "--backbone", "convnext_atto", "--img-size", "16", "--data", "generated"]
    fails_cleanly(
        [*args, "--max-steps", "1", "--batch-size", "4", "--head", "linear", "--out", out],
        "backbone 'convnext_atto' cannot run at image size 16",
        "use a larger --img-size",
    )
    assert not out.exists()  # refused before the run: the same command at a working size may use OUT


def test_probe_from_scratch_at_a_size_the_backbone_cannot_run_is_one_line(tmp_path):
    out = tmp_path / "probe"
    fails_cleanly(
        ["probe", "--from-scratch", "--backbone", "convnext_atto", "--img-size", "16", "--out", out],
        "backbone 'convnext_atto' cannot run at image size 16",
        "use a larger --img-size",
    )


def test_the_figure_colours_labels_above_255_apart_and_keeps_ignore_gray(tmp_path):
    import torch

    from pretexts.engine.evaluation.segmentation import figure

    truth = torch.full((1, 8, 8), 3)
    truth[0, :4] = 260
    truth[0, 0, 0] = figure.IGNORE
    pred = truth.clone()
    pred[0, 0, 0] = 300
    drawn = []
    real = figure.class_palette
    figure.class_palette = lambda size=256: drawn.append(size) or real(size)
    try:
        figure.save_figure(torch.rand(1, 3, 8, 8), pred, truth, tmp_path / "f.png", rows=1)
    finally:
        figure.class_palette = real
    assert drawn == [301] and (tmp_path / "f.png").stat().st_size > 0
    palette = real(301)
    assert tuple(palette[figure.IGNORE]) == figure.IGNORED_COLOUR
    assert len({tuple(palette[c]) for c in (3, 260, 300)}) == 3
