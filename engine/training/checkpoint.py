"""Checkpoints written atomically (temporary file, then rename) and loaded with clear errors."""
import contextlib
import os
import random
import secrets
from pathlib import Path

import numpy as np
import torch

from pretexts.errors import CheckpointError, OutputError

FORMAT_VERSION = 1


def atomic_save(obj, path: str | os.PathLike, write=None) -> None:
    """`write(obj, file)` (torch.save) to a temporary file in the same folder, fsync, then rename over `path`.

    A process killed at any moment leaves either the old file or the new one, never half of one.
    The temporary files of earlier killed saves are removed first, so they never fill the disk.
    A failed write (full disk, no permission) raises OutputError and keeps the old file.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        with open(tmp, "xb") as fh:  # not mkstemp: the file gets the umask's permissions, not 0600
            (write or torch.save)(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        cause = os_error(err)
        if cause is None:
            raise
        kept = "the previous checkpoint is kept" if path.is_file() else "nothing was written"
        raise OutputError(f"cannot write checkpoint '{path}': {cause.strerror or cause}; {kept}. "
                          f"Free some space or choose another --out.") from err


def os_error(err: BaseException | None) -> OSError | None:
    """The OSError behind `err`: torch.save reports a failed write (ENOSPC, EFBIG) as a RuntimeError
    whose context is the OSError."""
    while err is not None and not isinstance(err, OSError):
        err = err.__cause__ or err.__context__
    return err


def load_checkpoint(path: str | os.PathLike, map_location="cpu") -> dict:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{path}' does not exist; give the path of a checkpoint.pt "
                              f"written by `pretexts train`.")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:
        cause = " ".join(str(err).split()).split(". ")[0]  # torch adds paragraphs of advice
        raise CheckpointError(f"checkpoint '{path}' cannot be read ({type(err).__name__}: {cause}); "
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
