"""Masked image modelling: gridded and random-rectangle masks (paper, Section 4.1 and Table 1)."""
import math

import torch
from torch import Tensor

from .base import Corrupted, Pretext, rand, uniform
from .errors import ParameterError
from .params import Param
from .registry import register


def check_fits(task: str, name: str, value: int, images: Tensor) -> None:
    """Raise when a size parameter (grid cell, SR factor) is larger than the image."""
    height, width = images.shape[-2:]
    if value > min(height, width):
        raise ParameterError(
            f"{task}: parameter '{name}' is {value} but the images are {height}x{width}; "
            f"use {name} <= {min(height, width)}.")


@register("gridded-mask")
class GriddedMask(Pretext):
    """Blank a fixed fraction of the square cells of a grid (paper, Table 1: Gridded 16/24/32).

    The image is cut into `grid` x `grid` pixel cells (cells at the right and bottom border are cut
    short when the size is not a multiple of `grid`) and exactly round(ratio * cells) of them, chosen
    uniformly per image, are set to 0. Grid 16 with a patch-16 ViT is the paper's like-for-like
    comparison with MAE; ratio 0.7 is the best column of Table 1 for every grid size.
    """

    params = {
        "grid": Param(16, int, 1, 1024, help="cell side in pixels (paper: 16, 24, 32)"),
        "ratio": Param(0.7, float, 0.0, 1.0, help="fraction of cells blanked (paper: 0.1 to 0.9)"),
    }

    def corrupt(self, images: Tensor, generator=None) -> Corrupted:
        check_fits(self.name, "grid", self.grid, images)
        batch, _, height, width = images.shape
        rows, cols = math.ceil(height / self.grid), math.ceil(width / self.grid)
        cells = rows * cols
        count = round(self.ratio * cells)
        # The rank of a uniform score picks exactly `count` cells per image, without a loop.
        rank = rand((batch, cells), generator, images.device).argsort(1).argsort(1)
        cell_mask = (rank < count).view(batch, 1, rows, cols)
        mask = cell_mask.repeat_interleave(self.grid, 2).repeat_interleave(self.grid, 3)[..., :height, :width]
        state = images.masked_fill(mask, 0.0)
        return Corrupted(state=state, target=images, info={"mask": mask[:, 0], "blanked_cells": count})


@register("random-mask")
class RandomMask(Pretext):
    """Blank `count` random rectangles per image (paper, Table 1: Random small / Random large).

    Normalised size is read as area: each box covers `area` ~ U(low, high) of the image, with aspect
    ratio r ~ U(aspect_low, aspect_high) (height over width), so h = sqrt(area * r) * H and
    w = sqrt(area / r) * W. Box centres are uniform over the image; boxes may overlap and are clipped
    at the border, so the blanked fraction is below count * mean area. Presets from Section 4.1:
    small = 75 boxes of U(0.01, 0.025), large = 25 boxes of U(0.02, 0.05) (the default, 79.7 top-1).
    """

    params = {
        "count": Param(25, int, 1, 1000, help="boxes per image"),
        "low": Param(0.02, float, 0.0, 1.0, help="smallest box area, as a fraction of the image"),
        "high": Param(0.05, float, 0.0, 1.0, help="largest box area, as a fraction of the image"),
        "aspect_low": Param(0.5, float, 0.01, 100.0, help="smallest height/width ratio"),
        "aspect_high": Param(2.0, float, 0.01, 100.0, help="largest height/width ratio"),
    }
    presets = {
        "small": {"count": 75, "low": 0.01, "high": 0.025},
        "large": {"count": 25, "low": 0.02, "high": 0.05},
    }

    def check(self) -> None:
        for low, high in (("low", "high"), ("aspect_low", "aspect_high")):
            if getattr(self, low) > getattr(self, high):
                raise ParameterError(
                    f"{self.name}: {low}={getattr(self, low)} must be <= {high}={getattr(self, high)}.")

    def corrupt(self, images: Tensor, generator=None) -> Corrupted:
        batch, _, height, width = images.shape
        device, shape = images.device, (batch, self.count, 1)
        area = uniform(shape, self.low, self.high, generator, device)
        aspect = uniform(shape, self.aspect_low, self.aspect_high, generator, device)
        centre_y, centre_x = rand(shape, generator, device), rand(shape, generator, device)
        half_h, half_w = (area * aspect).sqrt() / 2, (area / aspect).sqrt() / 2
        # A pixel is blanked when its centre lies inside a box, in normalised coordinates.
        ys = (torch.arange(height, device=device) + 0.5) / height
        xs = (torch.arange(width, device=device) + 0.5) / width
        in_rows = ((ys - centre_y).abs() < half_h).float()  # [B, count, H]
        in_cols = ((xs - centre_x).abs() < half_w).float()  # [B, count, W]
        # Summing row x column indicators over boxes gives [B, H, W] without a [B, count, H, W] tensor.
        mask = torch.bmm(in_rows.transpose(1, 2), in_cols) > 0
        state = images.masked_fill(mask.unsqueeze(1), 0.0)
        return Corrupted(state=state, target=images, info={"mask": mask})
