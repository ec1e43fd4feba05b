"""Gridded and random-rectangle masks (paper, Table 1), and what their masked pixels hold (`fill`)."""

import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from pretexts import ParameterError, create_pretext
from pretexts.cli import main
from pretexts.engine.methods.states import state_adapter
from pretexts.tasks.masking import FILLS


def positive_images(n, size=32):
    """Images with no zero pixel, so every 0 in a state was put there by the mask."""
    return 0.1 + 0.9 * torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def blanked(state):
    return (state == 0).all(1)  # [B, H, W]


@pytest.mark.parametrize("grid, ratio, size", [(8, 0.3, 64), (16, 0.7, 64), (24, 0.5, 96), (5, 0.9, 32)])
def test_gridded_mask_hits_its_ratio_within_one_cell(grid, ratio, size):
    images = positive_images(6, size)
    sample = create_pretext("gridded-mask", grid=grid, ratio=ratio, fill="black")(
        images, torch.Generator().manual_seed(0)
    )
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
    with pytest.raises(ParameterError, match=r"grid 48 is larger than the image \(32 px\); use grid <= 8"):
        create_pretext("gridded-mask", grid=48)(positive_images(1))


def test_a_grid_of_2x2_cells_is_refused_and_the_default_grid_follows_the_image():
    with pytest.raises(ParameterError, match=r"^gridded-mask: grid 16 leaves 2x2 cells at 32 px; use grid <= 8 "):
        create_pretext("gridded-mask", grid=16)(positive_images(1))
    task = create_pretext("gridded-mask")
    assert task(positive_images(1, 32)).info["blanked_cells"] == round(0.7 * 16 * 16) and task.grid == 2
    assert task(positive_images(1, 224)).info["blanked_cells"] == round(0.7 * 14 * 14) and task.grid == 16


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
    task = create_pretext("random-mask", preset=preset, fill="black")
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


# ---- fill: what the masked pixels hold ----------------------------------------------------------------
MASKS = [("gridded-mask", {"grid": 4}), ("random-mask", {})]


def fill_sample(name, kwargs, fill, images, seed=0):
    return create_pretext(name, fill=fill, **kwargs)(images, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name, kwargs", MASKS)
def test_every_fill_keeps_the_mask_and_the_unmasked_pixels(name, kwargs, real_images):
    samples = {fill: fill_sample(name, kwargs, fill, real_images) for fill in FILLS}
    mask = samples["black"].info["mask"]
    assert 0.2 < mask.float().mean() < 0.8
    keep = ~mask.unsqueeze(1).expand_as(real_images)
    for fill, sample in samples.items():
        assert torch.equal(sample.info["mask"], mask), fill  # the fill changes what is hidden, not where
        assert torch.equal(sample.state[keep], real_images[keep]), fill
        assert torch.equal(sample.target, real_images)
        assert 0 <= sample.state.min() and sample.state.max() <= 1


@pytest.mark.parametrize("name, kwargs", MASKS)
def test_black_is_zero_and_gray_is_half_in_the_masked_region(name, kwargs, real_images):
    for fill, value in (("black", 0.0), ("gray", 0.5)):
        sample = fill_sample(name, kwargs, fill, real_images)
        masked = sample.info["mask"].unsqueeze(1).expand_as(real_images)
        assert (sample.state[masked] == value).all(), fill


def test_gray_is_nudged_off_a_normalisation_mean_it_comes_near():
    """A gray within 0.02 of the normalisation mean in every channel would give all-zero tokens after normalisation;
    each channel moves to 0.02 from it, on its own side (up on a tie); one channel farther off leaves gray alone."""
    images = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    for norm_mean, colour in (((0.49, 0.51, 0.5), (0.51, 0.49, 0.52)), ((0.49, 0.51, 0.4), (0.5, 0.5, 0.5))):
        task = create_pretext("gridded-mask", grid=8, ratio=0.5)
        task.norm_mean = norm_mean
        sample = task(images, torch.Generator().manual_seed(0))
        filled = sample.state[0][:, sample.info["mask"][0]]
        assert torch.allclose(filled, torch.tensor(colour).view(3, 1).expand_as(filled)), norm_mean


def test_the_pixel_adapter_gives_the_gray_fill_the_models_normalisation_mean():
    class Model:
        mean = torch.tensor([0.5, 0.5, 0.5]).view(1, 3, 1, 1)

    task = state_adapter(create_pretext("random-mask"), Model()).prepare()
    assert task.norm_mean == (0.5, 0.5, 0.5)
    images = torch.full((1, 3, 32, 32), 0.49)
    sample = task(images, torch.Generator().manual_seed(0))
    assert torch.allclose(sample.state[0][:, sample.info["mask"][0]], torch.tensor(0.52))


def test_fill_defaults_to_gray_and_a_bad_fill_names_the_choices():
    assert create_pretext("random-mask").fill == create_pretext("gridded-mask").fill == "gray"
    with pytest.raises(ParameterError, match=r"'fill' is 'white'; allowed: gray, black\.$"):
        create_pretext("random-mask", fill="white")


def test_list_verbose_shows_the_fill_and_its_choices():
    result = CliRunner().invoke(main, ["list", "-v", "*-mask"])
    assert result.exit_code == 0
    assert result.output.count("--task-arg fill=...  one of gray, black, default gray") == 2


def test_mixed_passes_the_fill_to_its_masks(real_images):
    task = create_pretext("mixed", tasks="random-mask,colorization", fill="black")
    assert [getattr(t, "fill", None) for t in task.subtasks] == ["black", None]
    images = real_images.clamp(min=0.01)
    sample = task(images, torch.Generator().manual_seed(0))
    masked = sample.info["task"] == 0
    part = sample.info["parts"][0]["mask"].unsqueeze(1).expand_as(images[masked])
    assert (sample.state[masked][part] == 0).all() and part.any()
    assert create_pretext("mixed").subtasks[0].fill == "gray"
    with pytest.raises(ParameterError, match="allowed: gray, black"):
        create_pretext("mixed", fill="zero")
