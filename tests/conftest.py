"""Shared fixtures: real CIFAR-10 images from the embedded sample, and tiny energy models."""

import os

# pytest-xdist runs one worker per core (`-n auto`): each worker, and every process it starts (the CLI in a
# subprocess, torchrun's ranks), computes on one thread; two OpenMP threads per worker spin-wait on each other's core
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"

import numpy as np
import pytest
import torch
from PIL import Image

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

from pretexts.engine.data.datasets import SAMPLE_DIR


def load_real_images(split: str = "train", count: int = 16) -> torch.Tensor:
    """`count` embedded CIFAR-10 images, one class after another, as float [B,3,32,32] in [0,1]."""
    paths = sorted((SAMPLE_DIR / split).glob("*/*.png"))
    step = max(1, len(paths) // count)
    arrays = [np.asarray(Image.open(p).convert("RGB")) for p in paths[::step][:count]]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255


@pytest.fixture(scope="session", autouse=True)
def private_listing_cache(tmp_path_factory):
    """`pretexts list` caches the built-ins' listing under $XDG_CACHE_HOME: the tests keep theirs apart from the
    user's (subprocesses inherit the variable)."""
    import os

    previous = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if previous is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = previous


@pytest.fixture(scope="session", autouse=True)
def eager_unless_asked():
    """`--compile auto` would compile a long enough ViT run with inductor (minutes on a CPU): in-process tests run
    eagerly unless they ask for a backend; tests/test_compile_auto.py sets the rule's real margin back."""
    from pretexts.engine.training import compile_choice

    real, compile_choice.MARGIN = compile_choice.MARGIN, 10**12
    yield real
    compile_choice.MARGIN = real


@pytest.fixture(scope="session")
def real_images() -> torch.Tensor:
    return load_real_images("train", 16)


@pytest.fixture(scope="session")
def held_out_images() -> torch.Tensor:
    return load_real_images("val", 32)
