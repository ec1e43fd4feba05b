"""The masks' `noise` and `mean` fills, which the package does not offer, as a task plugin of the representation
study: its energy-noise and energy-mean arms (arms.py) train on them. Both were measured against gray and black and
not kept (docs/results/mask-fills.md: noise boxes are unstable, the visible-mean colour fine-tunes below gray).

Importing this module registers `study-random-mask` through the public plugin API (docs/plugins.md): the package's
random-mask, same parameters, presets and draws, with the two fills added to `fill`.
"""

import torch
from torch import Tensor

import pretexts
from pretexts import Param
from pretexts.base import rand
from pretexts.tasks.masking import FILLS, RandomMask, visible_mean

STUDY_TASK = "study-random-mask"
STUDY_FILLS = (*FILLS, "noise", "mean")


@pretexts.register(STUDY_TASK)
class StudyRandomMask(RandomMask):
    """random-mask with the study's fills too: `noise` (U(0, 1) per pixel) and `mean` (each image's visible mean).

    `noise` fills the boxes with U(0, 1) per pixel and channel, drawn from the task's generator after the boxes, so
    a seed gives the same boxes whatever the fill; `mean` with each image's mean colour over its visible pixels
    (gray when nothing is visible), moved off the normalisation mean by the rule that keeps gray off it. `gray` and
    `black` are the package's.
    """

    params = {
        **RandomMask.params,
        "fill": Param(
            "gray",
            str,
            choices=STUDY_FILLS,
            help="what masked pixels hold: the package's gray and black, or the study's noise (U(0, 1) per pixel "
            "and channel) and mean (each image's visible mean colour)",
        ),
    }

    def draw(self, images: Tensor, generator=None) -> dict:
        """The package's boxes, then the `noise` fill's pixels ("noise", [B, 3, H, W]) from the same generator."""
        params = super().draw(images, generator)
        if self.fill == "noise":
            params["noise"] = rand(images.shape, generator, images.device).to(images.dtype)
        return params

    def fill_masked(self, images: Tensor, mask: Tensor, params: dict) -> Tensor:
        if self.fill == "noise":
            return torch.where(mask, params["noise"], images)
        if self.fill == "mean":
            colour = self.off_norm_mean(visible_mean(images, mask))
            return torch.where(mask, colour.to(images.dtype), images)
        return super().fill_masked(images, mask, params)
