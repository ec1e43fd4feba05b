"""Super-resolution, denoising and colorization (paper, Table 2)."""

import pytest
import torch
from pretext_images import cifar_batch

from pretexts import ParameterError, create_pretext


@pytest.mark.parametrize("scale", [2, 4, 8, 16, 32])
def test_super_resolution_is_constant_on_each_block(scale):
    # 128 px, so the paper's scales at 224 px still leave at least 4 x 4 low-resolution pixels
    images = torch.nn.functional.interpolate(cifar_batch(4), scale_factor=4, mode="bilinear").clamp(0, 1)
    state = create_pretext("super-resolution", scale=scale)(images).state
    blocks = state.unfold(2, scale, scale).unfold(3, scale, scale)  # [B, 3, H/s, W/s, s, s]
    assert torch.equal(blocks, blocks[..., :1, :1].expand_as(blocks))
    assert state.min() >= 0 and state.max() <= 1
    # Each block holds (about) the mean of its pixels: antialiased bicubic, not a point sample.
    means = images.unfold(2, scale, scale).unfold(3, scale, scale).mean((-1, -2))
    assert (blocks[..., 0, 0] - means).abs().mean() < 0.05


def test_super_resolution_of_an_indivisible_size_keeps_top_left_blocks():
    images = torch.rand(2, 3, 30, 30)
    state = create_pretext("super-resolution", scale=7)(images).state
    assert state.shape == images.shape
    full = state[..., :28, :28].unfold(2, 7, 7).unfold(3, 7, 7)
    assert torch.equal(full, full[..., :1, :1].expand_as(full))
    edge = state[..., 28:, :7]  # the last row of blocks is cut short to 2 pixels
    assert torch.equal(edge, edge[..., :1, :1].expand_as(edge))


def test_super_resolution_scale_larger_than_the_image_is_a_clear_error():
    with pytest.raises(ParameterError, match=r"scale 64 is larger than the image \(32 px\); use scale <= 8"):
        create_pretext("super-resolution", scale=64)(cifar_batch(1))


def test_super_resolution_scale_that_leaves_a_2x2_image_is_refused_naming_one_that_fits():
    with pytest.raises(
        ParameterError,
        match=r"^super-resolution: scale 16 leaves 2x2 low-resolution pixels at 32 px; "
        r"use scale <= 8 \(e.g. 2, the paper's 16 at 224 px scaled\)\.$",
    ):
        create_pretext("super-resolution", scale=16)(cifar_batch(1))
    assert create_pretext("super-resolution", scale=8)(cifar_batch(1)).info["low"].shape[-1] == 4


@pytest.mark.parametrize("size, scale", [(224, 16), (32, 2), (64, 5), (16, 2)])
def test_super_resolution_default_is_the_papers_16_at_224_px_scaled_to_the_image(size, scale):
    task = create_pretext("super-resolution")
    sample = task(torch.rand(2, 3, size, size), torch.Generator().manual_seed(0))
    assert task.scale == scale and sample.info["low"].shape[-1] == -(-size // scale)
    assert task.values() == {"scale": "auto"} == create_pretext("super-resolution", scale="auto").values()


def test_colorization_has_three_equal_channels():
    state = create_pretext("colorization")(cifar_batch(4)).state
    assert torch.equal(state[:, 0], state[:, 1]) and torch.equal(state[:, 1], state[:, 2])


def test_denoising_matches_the_formula():
    images = cifar_batch(4)
    sample = create_pretext("denoising")(images, torch.Generator().manual_seed(7))
    # Re-draw g then e from the same seed, in the documented order.
    again = torch.Generator().manual_seed(7)
    gamma = torch.rand(4, generator=again)
    noise = torch.randn(images.shape, generator=again)
    assert torch.equal(sample.info["gamma"], gamma)
    g = gamma.view(-1, 1, 1, 1)
    assert torch.allclose(sample.state, g.sqrt() * images + (1 - g).sqrt() * noise, atol=1e-6)


def test_denoising_gamma_range_is_settable():
    task = create_pretext("denoising", gamma_low=0.25, gamma_high=0.5)
    gamma = task(cifar_batch(8), torch.Generator().manual_seed(0)).info["gamma"]
    assert ((gamma >= 0.25) & (gamma <= 0.5)).all()
    fixed = create_pretext("denoising", gamma_low=1.0, gamma_high=1.0)
    images = cifar_batch(2)
    assert torch.allclose(fixed(images).state, images)  # g = 1: no noise
