"""Checkpoints written atomically (temporary file, then rename) and loaded with clear errors."""
import os
import random
import tempfile
from pathlib import Path

import numpy as np
import torch

from pretexts.errors import CheckpointError

FORMAT_VERSION = 1


def atomic_save(obj, path: str | os.PathLike) -> None:
    """torch.save to a temporary file in the same folder, fsync, then rename over `path`.

    A process killed at any moment leaves either the old file or the new one, never half of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist; give the path of a checkpoint.pt "
                              f"written by `pretexts train`.")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:
        raise CheckpointError(f"checkpoint '{path}' cannot be read ({type(err).__name__}: {err}); "
                              f"it may be truncated. Use an earlier checkpoint.") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "config" not in ckpt:
        raise CheckpointError(f"'{path}' is not a pretexts checkpoint (no model or config inside).")
    if ckpt.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint '{path}' has format version {ckpt.get('format_version')}; "
                              f"this pretexts reads version {FORMAT_VERSION}.")
    return ckpt


def rng_states() -> dict:
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
