"""Colorization: restore colour from a grayscale image (paper, Section 3.3 and Table 2)."""

import warnings

import kornia
from torch import Tensor

from ..base import Corrupted, Pretext
from ..registry import register


@register("colorization")
class Colorization(Pretext):
    """Grayscale input, colour target (paper, Table 2: 79.5 top-1 for ViT-S).

    The luminance uses Kornia's ITU-R 601 weights (0.299, 0.587, 0.114), repeated over the three
    channels so the backbone's input stays RGB. The trivial restorer is the grayscale itself. Images without
    colour (grayscale files, read as RGB) leave nothing to restore, which it warns about once, judged on the first
    batch that is not blank (so a run pays for the check, and its device sync, once).
    """

    trivial_restorer = "the grayscale itself"
    colour_checked = False

    def apply(self, images: Tensor, params: dict) -> Corrupted:
        if not self.colour_checked and images.numel() and bool(images.amax() > images.amin()):
            self.colour_checked = True  # the start checks' all-zero batch says nothing
            if colourless(images):
                warnings.warn(
                    f"{self.name}: the images have no colour (their three channels are equal), so the grayscale "
                    "input already equals the target and there is nothing to restore (alone, or as a share of "
                    "mixed); train on colour images or with another task.",
                    stacklevel=2,
                )
        gray = kornia.color.rgb_to_grayscale(images).expand_as(images).contiguous()
        return Corrupted(state=gray, target=images)

    def trivial_restore(self, sample: Corrupted) -> Tensor:
        return sample.state


def colourless(images: Tensor) -> bool:
    """Whether the images' three channels are equal everywhere (grayscale files read as RGB)."""
    return bool((images[:, 1:] == images[:, :1]).all())
