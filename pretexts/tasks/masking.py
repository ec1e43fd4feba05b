"""Masked image modelling: gridded and random-rectangle masks (paper, Section 4.1 and Table 1)."""

import math

import torch
from torch import Tensor

from ..base import Corrupted, Pretext, rand, uniform
from ..errors import ParameterError
from ..params import Param
from ..registry import register

# What the masked pixels hold. The paper blanks them ("all zeros", in a pixel space it does not state): black in [0, 1]
# pixels, the normalisation mean in normalised ones. On small images black boxes are a shortcut: the scalar energy
# learns how dark the image is; a mid-gray fill, near the normalisation mean, removes it (docs/results/mask-fills.md).
FILLS = ("gray", "black")
GRAY = 0.5  # a constant, kept off the normalisation mean (see NEAR_MEAN)
# a fill colour whose every channel is closer than this to the normalisation mean is moved off: a box of the mean is
# all zeros after normalisation, zero-variance tokens for ConvNeXt's post-stem LayerNorm (the loss at init explodes)
NEAR_MEAN = 0.02
IMAGENET_MEAN = (0.485, 0.456, 0.406)  # what the energy model subtracts unless its backbone says otherwise


def fill_param(prefix: str = "") -> Param:
    """The `fill` parameter of a masking task (and of a mixture, which passes it on)."""
    return Param(
        "gray",
        str,
        choices=FILLS,
        help=prefix + "what masked pixels hold: gray 0.5 (default; 0.52 where the model normalises with 0.5); "
        "black 0 (the paper's zeros read in [0, 1] pixels)",
    )


def visible_mean(images: Tensor, mask: Tensor) -> Tensor:
    """Each image's mean colour over its unmasked pixels, [B, 3, 1, 1] in float32; `mask` [B, 1, H, W] is True
    where masked. An image with no visible pixel gets gray (0.5)."""
    visible = (~mask).to(torch.float32)
    count = visible.sum((2, 3), keepdim=True)
    total = (images.float() * visible).sum((2, 3), keepdim=True)
    return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, GRAY))


class MaskingTask(Pretext):
    """What the masking tasks share: the `fill` of the masked pixels and the trivial restorer.

    Fills (`--task-arg fill=...`): `black` sets masked pixels to 0 (the paper's "all zeros" read in [0, 1] pixels;
    read in normalised pixels, as MAE's pipeline feeds them, its zeros are the normalisation mean, which gray comes
    near and the rule below keeps every fill off); `gray` to the constant 0.5 (the default: the one fill measured
    to remove the brightness shortcut of black boxes). The rule for `gray`: when every channel of the colour lies
    within NEAR_MEAN (0.02) of the normalisation mean (`norm_mean`: the trained model's, ImageNet's by default),
    each channel is moved to exactly 0.02 from it, on its own side (up on a tie); so gray is 0.52 for a backbone
    normalised with mean 0.5 (timm's Inception-style configs). A box of the normalisation mean itself is all zeros
    after normalisation: ConvNeXt's post-stem LayerNorm then sees zero-variance tokens, and the loss at init
    explodes (0.02 off it, the loss is that of gray).
    """

    trivial_restorer = "visible-mean fill"
    # declared: the corruption hides boxes of pixels and keeps the rest as they were (a plugin that masks without
    # subclassing this class declares it too); a ViT's `--loss auto` then picks the patch-centred loss
    masking = True
    # the gray fill keeps away from it: plain numbers the model side sets to the trained model's normalisation
    # mean (pretexts.engine.methods.states), the task itself knowing no model
    norm_mean: tuple = IMAGENET_MEAN

    def fill_masked(self, images: Tensor, mask: Tensor, params: dict) -> Tensor:
        """`images` with the pixels where `mask` [B, 1, H, W] is True replaced by the task's fill; `params` are the
        task's draw (a subclass's fill may draw its own there)."""
        if self.fill == "black":
            return images.masked_fill(mask, 0.0)
        gray = torch.full((1, 3, 1, 1), GRAY, device=images.device)
        return torch.where(mask, self.off_norm_mean(gray).to(images.dtype), images)

    def off_norm_mean(self, colour: Tensor) -> Tensor:
        """`colour` [B or 1, 3, 1, 1], each one moved NEAR_MEAN off the normalisation mean where it lies within
        NEAR_MEAN of it in every channel."""
        norm_mean = torch.tensor(self.norm_mean, device=colour.device).view(1, 3, 1, 1)
        offset = colour - norm_mean
        near = (offset.abs() < NEAR_MEAN).all(1, keepdim=True)
        return torch.where(near, norm_mean + torch.where(offset >= 0, NEAR_MEAN, -NEAR_MEAN), colour)

    def trivial_restore(self, sample: Corrupted) -> Tensor:
        """Each image's visible mean colour in its masked pixels (no nudge: this restores, it is not an input)."""
        mask = sample.info["mask"].unsqueeze(1)
        state = sample.state
        return torch.where(mask, visible_mean(state, mask).to(state.dtype), state)


@register("gridded-mask")
class GriddedMask(MaskingTask):
    """Blank a fixed fraction of the square cells of a grid (paper, Table 1: Gridded 16/24/32).

    The image is cut into `grid` x `grid` pixel cells (cells at the right and bottom border are cut
    short when the size is not a multiple of `grid`) and exactly round(ratio * cells) of them, chosen
    uniformly per image, are filled (`fill`, see MaskingTask: gray 0.5 by default, black 0 as the paper's
    zeros read in [0, 1] pixels). Grid 16 with a patch-16 ViT is the paper's like-for-like comparison with MAE;
    ratio 0.7 is the best column of Table 1 for every grid size. The paper's grids are for 224 px images: unset,
    `grid` is the paper's 16 scaled to the images (16 at 224 px: 14 x 14 cells; 2 at 32 px: 16 x 16 cells), and
    a given grid must leave at least 4 x 4 cells. info["mask"] [B, H, W] is True on the masked pixels.
    """

    params = {
        "grid": Param(
            16,
            int,
            1,
            1024,
            scaled="cells",
            help="cell side in pixels (paper at 224 px: 16, 24, 32); auto: the paper's 16 scaled",
        ),
        "ratio": Param(0.7, float, 0.0, 1.0, help="fraction of cells blanked (paper: 0.1 to 0.9)"),
        "fill": fill_param(),
    }

    def draw(self, images: Tensor, generator=None) -> dict:
        """ "cells": [B, rows, cols] True on the blanked cells."""
        self.fit(images)
        batch, _, height, width = images.shape
        rows, cols = math.ceil(height / self.grid), math.ceil(width / self.grid)
        # The rank of a uniform score picks exactly `blanked` cells per image, without a loop.
        rank = rand((batch, rows * cols), generator, images.device).argsort(1).argsort(1)
        cells = (rank < self.blanked(rows * cols)).view(batch, rows, cols)
        return {"cells": cells}

    def apply(self, images: Tensor, params: dict) -> Corrupted:
        self.fit(images)
        height, width = images.shape[-2:]
        cells = params["cells"].unsqueeze(1)
        mask = cells.repeat_interleave(self.grid, 2).repeat_interleave(self.grid, 3)[..., :height, :width]
        state = self.fill_masked(images, mask, params)
        count = self.blanked(cells.shape[-2] * cells.shape[-1])
        return Corrupted(state=state, target=images, info={"mask": mask[:, 0], "blanked_cells": count})

    def blanked(self, cells: int) -> int:
        """How many of an image's `cells` are blanked."""
        return round(self.ratio * cells)


@register("random-mask")
class RandomMask(MaskingTask):
    """Blank `count` random rectangles per image (paper, Table 1: Random small / Random large).

    Normalised size is read as area: each box covers `area` ~ U(low, high) of the image, with aspect
    ratio r ~ U(aspect_low, aspect_high) (height over width), so h = sqrt(area * r) * H and
    w = sqrt(area / r) * W. Box centres are uniform over the image; boxes may overlap and are clipped
    at the border, so the blanked fraction is below count * mean area. Presets from Section 4.1:
    small = 75 boxes of U(0.01, 0.025), large = 25 boxes of U(0.02, 0.05) (the default, 79.7 top-1). The
    boxes hold the task's `fill` (see MaskingTask: gray 0.5 by default, black 0 as the paper's zeros read in
    [0, 1] pixels).
    info["mask"] [B, H, W] is True on the masked pixels.
    """

    params = {
        "count": Param(25, int, 1, 1000, help="boxes per image"),
        "low": Param(0.02, float, 0.0, 1.0, help="smallest box area, as a fraction of the image"),
        "high": Param(0.05, float, 0.0, 1.0, help="largest box area, as a fraction of the image"),
        "aspect_low": Param(0.5, float, 0.01, 100.0, help="smallest height/width ratio"),
        "aspect_high": Param(2.0, float, 0.01, 100.0, help="largest height/width ratio"),
        "fill": fill_param(),
    }
    presets = {
        "small": {"count": 75, "low": 0.01, "high": 0.025},
        "large": {"count": 25, "low": 0.02, "high": 0.05},
    }

    def check(self) -> None:
        for low, high in (("low", "high"), ("aspect_low", "aspect_high")):
            if getattr(self, low) > getattr(self, high):
                raise ParameterError(
                    f"{self.name}: {low}={getattr(self, low)} must be <= {high}={getattr(self, high)}."
                )

    def draw(self, images: Tensor, generator=None) -> dict:
        """Each box's "area", "aspect", "centre_y" and "centre_x", [B, count]."""
        device, shape = images.device, (images.shape[0], self.count)
        area = uniform(shape, self.low, self.high, generator, device)
        aspect = uniform(shape, self.aspect_low, self.aspect_high, generator, device)
        centre_y, centre_x = rand(shape, generator, device), rand(shape, generator, device)
        return {"area": area, "aspect": aspect, "centre_y": centre_y, "centre_x": centre_x}

    def apply(self, images: Tensor, params: dict) -> Corrupted:
        height, width, device = *images.shape[-2:], images.device
        area, aspect, centre_y, centre_x = (
            params[k].unsqueeze(-1) for k in ("area", "aspect", "centre_y", "centre_x")
        )  # [B, count, 1]
        half_h, half_w = (area * aspect).sqrt() / 2, (area / aspect).sqrt() / 2
        # A pixel is blanked when its centre lies inside a box, in normalised coordinates.
        ys = (torch.arange(height, device=device) + 0.5) / height
        xs = (torch.arange(width, device=device) + 0.5) / width
        in_rows = ((ys - centre_y).abs() < half_h).float()  # [B, count, H]
        in_cols = ((xs - centre_x).abs() < half_w).float()  # [B, count, W]
        # Summing row x column indicators over boxes gives [B, H, W] without a [B, count, H, W] tensor.
        mask = torch.bmm(in_rows.transpose(1, 2), in_cols) > 0
        state = self.fill_masked(images, mask.unsqueeze(1), params)
        return Corrupted(state=state, target=images, info={"mask": mask})
