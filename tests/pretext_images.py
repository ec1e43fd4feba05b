"""Shared inputs of the pretext tests: a few real CIFAR-10 images and a tiny energy model."""
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from backbones import create_energy_model

# ../shared sits beside the clone, locally and in CI; without it the tests fall back to noise.
CIFAR = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10-subset" / "train"


def cifar_batch(n: int = 8) -> torch.Tensor:
    """n 32x32 images, float [0,1], one class after another; torch.rand when the data is absent."""
    by_class = [sorted(d.glob("*.png")) for d in sorted(CIFAR.glob("*"))] if CIFAR.is_dir() else []
    files = [f for row in zip(*by_class) for f in row][:n] if by_class else []
    if len(files) < n:
        return torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    arrays = np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files])
    return torch.from_numpy(arrays).permute(0, 3, 1, 2).float() / 255


@lru_cache(maxsize=None)
def tiny_vit(patch_size: int = 8):
    """A two-block ViT-Tiny at 32 px: small enough for double backward in a unit test."""
    torch.manual_seed(0)
    return create_energy_model("vit_tiny", img_size=32, patch_size=patch_size, depth=2)
