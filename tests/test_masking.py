"""Gridded and random-rectangle masks (paper, Table 1)."""
import math

import numpy as np
import pytest
import torch

from pretexts import ParameterError, create_pretext


def positive_images(n, size=32):
    """Images with no zero pixel, so every 0 in a state was put there by the mask."""
    return 0.1 + 0.9 * torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def blanked(state):
    return (state == 0).all(1)  # [B, H, W]


@pytest.mark.parametrize("grid, ratio, size", [(8, 0.3, 64), (16, 0.7, 32), (24, 0.5, 64), (5, 0.9, 32)])
def test_gridded_mask_hits_its_ratio_within_one_cell(grid, ratio, size):
    images = positive_images(6, size)
    sample = create_pretext("gridded-mask", grid=grid, ratio=ratio)(images, torch.Generator().manual_seed(0))
    mask = blanked(sample.state)
    assert torch.equal(mask, sample.info["mask"])
    cells = math.ceil(size / grid) ** 2
    # Whole cells: every cell is all blank or all kept, and round(ratio * cells) of them are blank.
    padded = torch.nn.functional.pad(mask.float(), (0, -size % grid, 0, -size % grid), value=-1)
    blocks = padded.unfold(1, grid, grid).unfold(2, grid, grid).flatten(-2)
    inside = blocks.clamp(min=0).sum(-1) / (blocks >= 0).sum(-1)
    assert ((inside == 0) | (inside == 1)).all()
    assert ((inside == 1).sum((1, 2)) == round(ratio * cells)).all()
    if size % grid == 0:  # equal cells: the blanked pixel fraction is within one cell of the ratio
        assert ((mask.float().mean((1, 2)) - ratio).abs() <= 1 / cells).all()
    assert torch.equal(sample.state[~mask.unsqueeze(1).expand_as(images)], images[~mask.unsqueeze(1).expand_as(images)])


def test_gridded_mask_draws_different_cells_per_image():
    masks = create_pretext("gridded-mask", grid=8)(positive_images(8), torch.Generator().manual_seed(0)).info["mask"]
    assert len({tuple(m.flatten().tolist()) for m in masks}) > 1


def test_gridded_mask_larger_than_the_image_is_a_clear_error():
    with pytest.raises(ParameterError, match=r"'grid' is 48 but the images are 32x32; use grid <= 32"):
        create_pretext("gridded-mask", grid=48)(positive_images(1))


def expected_coverage(count, low, high, size, aspect=(0.5, 2.0), draws=20000, seed=0):
    """Mean blanked fraction, semi-analytically: for a box of height h, the chance that a uniform centre
    covers a pixel centre u is the length of [u - h/2, u + h/2] inside [0, 1]; boxes are independent."""
    rng = np.random.default_rng(seed)
    area, ratio = rng.uniform(low, high, draws), rng.uniform(*aspect, draws)
    h, w = np.sqrt(area * ratio), np.sqrt(area / ratio)
    u = (np.arange(size) + 0.5) / size

    def hit(extent):  # [draws, size]
        return np.clip(u + extent[:, None] / 2, 0, 1) - np.clip(u - extent[:, None] / 2, 0, 1)

    per_box = np.einsum("dy,dx->yx", hit(h), hit(w)) / draws  # chance one box covers pixel (y, x)
    return float((1 - (1 - per_box) ** count).mean())


@pytest.mark.parametrize("preset", ["small", "large"])
def test_random_mask_presets_cover_the_expected_area(preset):
    task = create_pretext("random-mask", preset=preset)
    sample = task(positive_images(256), torch.Generator().manual_seed(0))
    mask = blanked(sample.state)
    assert torch.equal(mask, sample.info["mask"])
    expected = expected_coverage(task.count, task.low, task.high, 32)
    assert abs(mask.float().mean().item() - expected) < 0.02, (mask.float().mean(), expected)
    # Overlap and clipping keep the cover below the sum of the box areas.
    assert expected < task.count * (task.low + task.high) / 2


def test_random_mask_presets_match_the_paper():
    small, large = create_pretext("random-mask", preset="small"), create_pretext("random-mask", preset="large")
    assert (small.count, small.low, small.high) == (75, 0.01, 0.025)
    assert (large.count, large.low, large.high) == (25, 0.02, 0.05)
    assert create_pretext("random-mask").values() == large.values()


def test_a_single_box_has_the_drawn_area_and_aspect():
    # One box of area exactly 1/16 and aspect 1 on a 64 px image: a 16 x 16 square, unless clipped.
    task = create_pretext("random-mask", count=1, low=1 / 16, high=1 / 16, aspect_low=1.0, aspect_high=1.0)
    mask = task(positive_images(64, 64), torch.Generator().manual_seed(0)).info["mask"]
    rows, cols = mask.any(2).sum(1), mask.any(1).sum(1)
    inside = (rows == 16) & (cols == 16)
    assert inside.sum() > 16 and (mask.sum((1, 2))[inside] == 256).all()
    assert (rows <= 16).all() and (cols <= 16).all()


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(ParameterError, match="unknown preset 'smal'.*small"):
        create_pretext("random-mask", preset="smal")
