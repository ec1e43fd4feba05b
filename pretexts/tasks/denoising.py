"""Denoising with a diffusion-style noise schedule (paper, Section 4.1 and Table 2)."""

import torch
from torch import Tensor

from ..base import Corrupted, Pretext, uniform
from ..errors import ParameterError
from ..params import Param
from ..registry import register


@register("denoising")
class Denoising(Pretext):
    """Mix each image with Gaussian noise, x0 = sqrt(g) x + sqrt(1 - g) e (paper, Table 2: 79.2 top-1).

    g ~ U(gamma_low, gamma_high) per image (the paper draws U(0, 1)) and e ~ N(0, I), applied to
    images in [0, 1] and not clamped, as in the formula. The generator draws g first ([B]), then e
    ([B, 3, H, W]); g is returned in info["gamma"].
    """

    trivial_restorer = "best constant shrinkage toward the image mean"

    params = {
        "gamma_low": Param(0.0, float, 0.0, 1.0, help="smallest signal fraction g"),
        "gamma_high": Param(1.0, float, 0.0, 1.0, help="largest signal fraction g"),
    }

    def check(self) -> None:
        if self.gamma_low > self.gamma_high:
            raise ParameterError(f"{self.name}: gamma_low={self.gamma_low} must be <= gamma_high={self.gamma_high}.")

    def draw(self, images: Tensor, generator=None) -> dict:
        """ "gamma" [B], then "noise" [B, 3, H, W] ~ N(0, I), drawn in float32 whatever the images' dtype (one seed,
        one corruption), then cast."""
        gamma = uniform((images.shape[0],), self.gamma_low, self.gamma_high, generator, images.device)
        noise = torch.randn(images.shape, generator=generator, device=images.device, dtype=torch.float32)
        noise = noise.to(images.dtype)
        return {"gamma": gamma, "noise": noise}

    def apply(self, images: Tensor, params: dict) -> Corrupted:
        gamma = params["gamma"]
        g = gamma.to(images.dtype).view(-1, 1, 1, 1)
        state = g.sqrt() * images + (1 - g).sqrt() * params["noise"]
        return Corrupted(state=state, target=images, info={"gamma": gamma})

    def preview(self, sample: Corrupted, state: Tensor) -> Tensor:
        """Each image stretched linearly from its own minimum to its maximum: the noisy state spans about [-4, 4],
        so a clamp to [0, 1] would show saturated confetti; each row is labelled with its g."""
        return stretched_preview(state, sample.info.get("gamma"))

    def trivial_restore(self, sample: Corrupted) -> Tensor:
        """m + k (x0 - m): the noisy image shrunk toward its own mean colour m (per image and channel) by one
        factor k for the whole batch, the least-squares best one in closed form, k = <x0 - m, x - m> / |x0 - m|^2.
        k is fitted to the clean batch (an oracle scalar, a linear baseline); k = 1 is the corrupted input, so
        its error is never above the corrupted input's on the same batch."""
        state, target = sample.state.float(), sample.target.float()
        mean = state.mean((2, 3), keepdim=True)
        deviation = state - mean
        k = (deviation * (target - mean)).sum() / deviation.pow(2).sum().clamp(min=1e-12)
        return (mean + k * deviation).to(sample.state.dtype)


DISPLAY = (
    "g: each row's signal fraction, x0 = sqrt(g) x + sqrt(1 - g) e; its noisy and restored states are each "
    "stretched from their own min to max, not clamped"
)


def stretched_preview(state: Tensor, gamma: Tensor | None) -> Tensor:
    """`state` [B,3,H,W] mapped per image into [0, 1] by its min and max, with `row_labels` ('g = 0.23', the
    signal fraction) and `display` (how it was mapped) for the figure (engine/training/figures.py)."""
    flat = state.detach().float().flatten(1)
    low, high = flat.min(1).values.view(-1, 1, 1, 1), flat.max(1).values.view(-1, 1, 1, 1)
    shown = (state.detach().float() - low) / (high - low).clamp(min=1e-8)
    if gamma is not None:
        shown.row_labels = [f"g = {g:.2f}" for g in gamma.tolist()]
    shown.display = DISPLAY
    return shown
