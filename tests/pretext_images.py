"""Shared inputs of the pretext tests: a few real CIFAR-10 images and a tiny energy model."""

from functools import cache

import numpy as np
import torch
from PIL import Image

from pretexts.engine.data.datasets import SAMPLE_DIR
from pretexts.engine.methods.energy.model import create_energy_model

CIFAR = SAMPLE_DIR / "train"  # the real CIFAR-10 images the package ships, 32 per class


def cifar_batch(n: int = 8) -> torch.Tensor:
    """n real 32x32 images, float [0,1], one class after another."""
    by_class = [sorted(d.glob("*.png")) for d in sorted(CIFAR.glob("*"))]
    files = [f for row in zip(*by_class) for f in row][:n]
    assert len(files) == n, f"the embedded sample holds {len(files)} images, fewer than {n}"
    arrays = np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files])
    return torch.from_numpy(arrays).permute(0, 3, 1, 2).float() / 255


@cache
def tiny_vit(patch_size: int = 8):
    """A two-block ViT-Tiny at 32 px: small enough for double backward in a unit test."""
    torch.manual_seed(0)
    return create_energy_model("vit_tiny", img_size=32, patch_size=patch_size, depth=2)
