"""Colorization: restore colour from a grayscale image (paper, Section 3.3 and Table 2)."""

import kornia
from torch import Tensor

from ..base import Corrupted, Pretext
from ..registry import register


@register("colorization")
class Colorization(Pretext):
    """Grayscale input, colour target (paper, Table 2: 79.5 top-1 for ViT-S).

    The luminance uses Kornia's ITU-R 601 weights (0.299, 0.587, 0.114), repeated over the three
    channels so the backbone's input stays RGB. The trivial restorer is the grayscale itself.
    """

    trivial_restorer = "the grayscale itself"

    def apply(self, images: Tensor, params: dict) -> Corrupted:
        gray = kornia.color.rgb_to_grayscale(images).expand_as(images).contiguous()
        return Corrupted(state=gray, target=images)

    def trivial_restore(self, sample: Corrupted) -> Tensor:
        return sample.state
