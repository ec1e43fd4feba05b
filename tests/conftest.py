"""Shared fixtures: real CIFAR-10 images from the embedded sample, and tiny energy models."""

import numpy as np
import pytest
import torch
from PIL import Image

from pretexts.engine.data.datasets import SAMPLE_DIR


def load_real_images(split: str = "train", count: int = 16) -> torch.Tensor:
    """`count` embedded CIFAR-10 images, one class after another, as float [B,3,32,32] in [0,1]."""
    paths = sorted((SAMPLE_DIR / split).glob("*/*.png"))
    step = max(1, len(paths) // count)
    arrays = [np.asarray(Image.open(p).convert("RGB")) for p in paths[::step][:count]]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255


@pytest.fixture(scope="session")
def real_images() -> torch.Tensor:
    return load_real_images("train", 16)


@pytest.fixture(scope="session")
def held_out_images() -> torch.Tensor:
    return load_real_images("val", 32)
