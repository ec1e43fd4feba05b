"""Super-resolution: restore detail from a blocky low-resolution copy (paper, Section 4.1 and Table 2)."""

import math

import torch.nn.functional as F
from kornia.geometry.transform import rescale, resize
from torch import Tensor

from ..base import Corrupted, Pretext
from ..params import Param
from ..registry import register


@register("super-resolution")
class SuperResolution(Pretext):
    """Bicubic downsampling by `scale`, nearest-neighbour upsampling back (paper, Table 2: SR 16x best).

    Table 2 tries scales 8, 14, 16, 24 and 32 at 224 px; 16 gives 79.6 top-1. Unset, `scale` is that 16 scaled
    to the images (2 at 32 px: a 16 x 16 low-resolution image, as 14 x 14 at 224 px), and a given scale must
    leave at least a 4 x 4 low-resolution image (scale <= 8 at 32 px). Downsampling is Kornia's bicubic
    resize with antialiasing (a Gaussian pre-blur of sigma (scale - 1) / 2, then a bicubic sample, so each
    low-resolution pixel summarises its block rather than aliasing), clamped to [0, 1] against bicubic overshoot.
    For a size not divisible by `scale` the low-resolution image has ceil(size / scale) pixels; it is upsampled by
    exactly `scale` and cropped, so blocks are scale x scale from the top-left corner and the last row and column of
    blocks are cut short. info["low"] holds the low-resolution image; the trivial restorer upsamples it
    bicubically instead.
    """

    trivial_restorer = "bicubic upsampling"

    params = {
        "scale": Param(
            16,
            int,
            1,
            1024,
            scaled="low-resolution pixels",
            help="downsampling factor (paper at 224 px: 8, 14, 16, 24, 32); auto: the paper's 16 scaled",
        )
    }

    def apply(self, images: Tensor, params: dict) -> Corrupted:
        self.fit(images)
        height, width = images.shape[-2:]
        small = (math.ceil(height / self.scale), math.ceil(width / self.scale))
        low = resize(images, small, interpolation="bicubic", antialias=True).clamp(0, 1)
        state = rescale(low, float(self.scale), interpolation="nearest")[..., :height, :width]
        return Corrupted(state=state.contiguous(), target=images, info={"low": low})

    def trivial_restore(self, sample: Corrupted) -> Tensor:
        """The low-resolution image upsampled by `scale` with bicubic interpolation (torch, half-pixel centres,
        so each low pixel sits at the centre of its block), cropped as the state is, clamped to [0, 1]."""
        low = sample.info["low"]
        self.fit(sample.state)
        height, width = sample.state.shape[-2:]
        size = (low.shape[-2] * self.scale, low.shape[-1] * self.scale)
        up = F.interpolate(low.float(), size=size, mode="bicubic", align_corners=False)[..., :height, :width]
        return up.clamp(0, 1).to(sample.state.dtype)
