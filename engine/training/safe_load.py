"""Reading a checkpoint without running code in it: torch's weights-only unpickler, and what a refusal means."""

import pickle
import re
from pathlib import Path

import torch

from pretexts.errors import CheckpointError

# what to do about a damaged checkpoint: there is no earlier one to fall back on
RECOVER = "restore it from a copy, or start its run over with --force (a run keeps only its latest checkpoint)"


def read_weights(path: Path) -> dict:
    """torch.load with weights_only=True on the CPU; a file it refuses is named as holding a payload, in one line,
    before any of it runs."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        refused = unsafe_globals(path, err)
        if not refused:
            raise unreadable(path, err) from None
    except Exception as err:
        raise unreadable(path, err) from None
    raise CheckpointError(
        f"checkpoint '{path}' holds Python objects that are not weights ({', '.join(refused)}); "
        f"it was refused without running them. Use a checkpoint written by pretexts that you trust."
    )


def unsafe_globals(path: Path, err: Exception) -> list[str]:
    """The globals the weights-only unpickler refuses: listed from the file without loading it, else from torch's
    message."""
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:
        return re.findall(r"GLOBAL ([\w.]+)", str(err))


def unreadable(path: Path, err: Exception) -> CheckpointError:
    with open(path, "rb") as file:
        head = file.read(2)
    if head and head not in (b"PK", b"\x80\x02"):  # torch.save writes a zip, or (legacy) a protocol-2 pickle
        return CheckpointError(
            f"'{path}' is not a checkpoint (torch.save did not write it); give the checkpoint.pt written by "
            f"`pretexts train`."
        )
    if not head:
        return CheckpointError(f"checkpoint '{path}' is empty (0 bytes); {RECOVER}.")
    cause = " ".join(str(err).split()).split(". ")[0]  # torch adds paragraphs of advice
    return CheckpointError(
        f"checkpoint '{path}' cannot be read ({type(err).__name__}{': ' + cause if cause else ''}); it may be "
        f"truncated (a copy cut short): {RECOVER}."
    )
