"""pretexts-jpeg: a pretext task the paper does not have, JPEG-artefact removal, as a plugin.

Installed, it registers through the `pretexts.tasks` entry point (see pyproject.toml), so
`pretexts list` shows `jpeg` and `pretexts train --task jpeg` trains with it.
"""

import torch
from kornia.enhance import jpeg_codec_differentiable

from pretexts import Corrupted, Param, ParameterError, Pretext, register
from pretexts.base import uniform


@register("jpeg")
class JpegArtefacts(Pretext):
    """JPEG-compress each image at a random quality; restoration removes the artefacts.

    quality ~ U(quality_low, quality_high) per image (JPEG scale, 1 = worst, 100 = best), applied by
    Kornia's differentiable JPEG codec in one batched call; the drawn qualities are in info["quality"].
    `draw` draws the qualities and `apply` compresses with them, so one draw can corrupt several batches alike.
    """

    params = {
        "quality_low": Param(10.0, float, 1.0, 100.0, help="lowest JPEG quality"),
        "quality_high": Param(50.0, float, 1.0, 100.0, help="highest JPEG quality"),
    }

    def check(self) -> None:
        if self.quality_low > self.quality_high:
            raise ParameterError(
                f"{self.name}: quality_low={self.quality_low} must be <= quality_high={self.quality_high}."
            )

    def draw(self, images, generator=None) -> dict:
        return {"quality": uniform((images.shape[0],), self.quality_low, self.quality_high, generator, images.device)}

    def apply(self, images, params) -> Corrupted:
        quality = params["quality"]
        with torch.no_grad():  # the corruption itself needs no gradient
            state = jpeg_codec_differentiable(images, quality.to(images.dtype))
        return Corrupted(state=state, target=images, info={"quality": quality})
