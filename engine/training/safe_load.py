"""Reading a checkpoint without running code in it: torch's weights-only unpickler, and what a refusal means."""

import pickle
import re
from pathlib import Path

import numpy as np
import torch

from pretexts.errors import CheckpointError

# What a version-1 checkpoint's numpy RNG state (a uint32 array) unpickles through, under numpy 1 and 2 names.
_reconstruct = getattr(np, "_core", np).multiarray._reconstruct
NUMPY_ARRAY_GLOBALS = [
    _reconstruct,
    (_reconstruct, "numpy.core.multiarray._reconstruct"),
    (_reconstruct, "numpy._core.multiarray._reconstruct"),
    np.ndarray,
    np.dtype,
    *[cls for cls in [getattr(getattr(np, "dtypes", None), "UInt32DType", None)] if cls],
]
NUMPY_ARRAY_NAMES = {
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "numpy.ndarray",
    "numpy.dtype",
    "numpy.dtypes.UInt32DType",
}


def read_weights(path: Path) -> dict:
    """torch.load with weights_only=True on the CPU; a file it refuses is named as old (numpy arrays inside,
    version 1) or as holding a payload, in one line, before any of it runs."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        refused = unsafe_globals(path, err)
        if not refused:
            raise unreadable(path, err) from None
    except Exception as err:
        raise unreadable(path, err) from None
    if set(refused) <= NUMPY_ARRAY_NAMES and version_1(path):
        raise old_format(path)
    raise CheckpointError(
        f"checkpoint '{path}' holds Python objects that are not weights ({', '.join(refused)}); "
        f"it was refused without running them. Use a checkpoint written by pretexts that you trust."
    )


def read_version_1(path: Path) -> dict:
    """A version-1 checkpoint, its numpy arrays rebuilt and nothing else beyond weights allowed."""
    with torch.serialization.safe_globals(NUMPY_ARRAY_GLOBALS):
        return torch.load(path, map_location="cpu", weights_only=True)


def version_1(path: Path) -> bool:
    try:
        ckpt = read_version_1(path)
    except Exception:
        return False
    return isinstance(ckpt, dict) and ckpt.get("format_version") == 1


def old_format(path: Path) -> CheckpointError:
    return CheckpointError(
        f"checkpoint '{path}' is in the old format (version 1), which is no longer read; convert "
        f"it once with `pretexts upgrade-checkpoint {path} NEW.pt` and use NEW.pt."
    )


def unsafe_globals(path: Path, err: Exception) -> list[str]:
    """The globals the weights-only unpickler refuses: listed from the file without loading it, else from torch's
    message."""
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:
        return re.findall(r"GLOBAL ([\w.]+)", str(err))


def unreadable(path: Path, err: Exception) -> CheckpointError:
    cause = " ".join(str(err).split()).split(". ")[0]  # torch adds paragraphs of advice
    return CheckpointError(
        f"checkpoint '{path}' cannot be read ({type(err).__name__}: {cause}); it may be "
        f"truncated. Use an earlier checkpoint."
    )
