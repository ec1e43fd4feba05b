"""`pretexts upgrade-checkpoint`: a version-1 checkpoint rewritten in the current format, read without running code."""

import os
from pathlib import Path

from pretexts.engine.training.checkpoint import (
    FORMAT_VERSION,
    load_checkpoint,
    numpy_state,
    python_state,
    save_checkpoint,
)
from pretexts.engine.training.safe_load import read_version_1, read_weights, unreadable
from pretexts.errors import CheckpointError


def upgrade_checkpoint(old: str | os.PathLike, new: str | os.PathLike) -> dict:
    """Write `old` (version 1) to `new` in version FORMAT_VERSION, with a checksum; returns the new checkpoint.

    Only weights and numpy's uint32 arrays are unpickled: a payload is refused as `load_checkpoint` refuses it.
    """
    old, new = Path(old), Path(new)
    if not old.is_file():
        raise CheckpointError(f"checkpoint '{old}' does not exist; give the path of the old checkpoint.")
    if new.resolve() == old.resolve():
        raise CheckpointError(f"the new checkpoint '{new}' would overwrite the old one; give another path.")
    try:
        ckpt = read_version_1(old)
    except Exception as err:
        read_weights(old)  # names what is wrong: a payload, or a truncated file
        raise unreadable(old, err) from None
    if not isinstance(ckpt, dict) or ckpt.get("format_version") != 1:
        version = ckpt.get("format_version") if isinstance(ckpt, dict) else None
        if version == FORMAT_VERSION:
            load_checkpoint(old)  # verified: an intact checkpoint needs no upgrade
            raise CheckpointError(f"checkpoint '{old}' is already in format version {FORMAT_VERSION}; use it as it is.")
        raise CheckpointError(
            f"'{old}' is not a version-1 pretexts checkpoint (format version {version}); nothing to upgrade."
        )
    rng = ckpt.get("rng")
    if isinstance(rng, dict):
        try:
            rng = {**rng, "numpy": numpy_state(rng["numpy"]), "python": python_state(rng["python"])}
        except (KeyError, TypeError, ValueError) as err:
            raise unreadable(old, err) from None
        ckpt["rng"] = rng
    save_checkpoint({**ckpt, "format_version": FORMAT_VERSION, "config": with_black_masks(ckpt.get("config"))}, new)
    return load_checkpoint(new)


def with_black_masks(config):
    """Version 1 predates the mask `fill` parameter: its masking runs filled with black, which the default (gray)
    is not, so a resumed or restored run keeps the boxes it was trained with."""
    if not isinstance(config, dict):
        return config
    import pretexts

    try:
        task = pretexts.create_pretext(config.get("task"), **config.get("task_args", {}))
    except Exception:  # noqa: BLE001 (an unknown or plugin task: left as it was, its own load says what is wrong)
        return config
    if "fill" in task.params and "fill" not in config.get("task_args", {}):
        return {**config, "task_args": {**config.get("task_args", {}), "fill": "black"}}
    return config
