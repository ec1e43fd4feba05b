"""Checkpoints written atomically (temporary file, then rename) with a checksum, and loaded with clear errors
without running code (weights only)."""

import os
import random
from pathlib import Path

import numpy as np
import torch

from pretexts.engine.training.checksum import KEY as CHECKSUM
from pretexts.engine.training.checksum import checksum, unchecksummable
from pretexts.engine.training.file_writes import replace_file
from pretexts.engine.training.safe_load import RECOVER, read_weights
from pretexts.errors import CheckpointError, ParameterError, suggest

FORMAT_VERSION = 2  # RNG states as tensors and plain values (weights-only loadable), a checksum


def atomic_save(obj, path: str | os.PathLike, write=None) -> None:
    """`write(obj, file)` (torch.save) by `replace_file`: a per-process temporary file beside `path`, fsynced, renamed
    over it. A process killed at any moment leaves the old file or the new one, never half of one; a full disk
    raises OutputError and keeps the old file.

    Args:
        obj (Any): What to save (a checkpoint's dict, a state dict).
        path: The file to write or replace; its folder is created where missing.
        write (Callable | None): `write(obj, binary_file)`; None: `torch.save`.

    Raises:
        OutputError: The file cannot be written (no permission, not a folder, a full disk); the old file is kept.
    """
    replace_file(path, lambda fh: (write or torch.save)(obj, fh), "checkpoint")


def save_checkpoint(ckpt: dict, path: str | os.PathLike) -> None:
    """`atomic_save` of `ckpt` with the format version (unless given) and the checksum `load_checkpoint` verifies."""
    ckpt = {"format_version": FORMAT_VERSION, **{k: v for k, v in ckpt.items() if k != CHECKSUM}}
    atomic_save({**ckpt, CHECKSUM: checksum(ckpt)}, path)


def load_checkpoint(path: str | os.PathLike, kinds: tuple[str, ...] | None = None) -> dict:
    """A checkpoint on the CPU (load_state_dict moves it), read without running code and checked: its format,
    its checksum, and, given `kinds`, that it is one of them ("pretrain", "finetune", "finetuned", "segmenter").

    Args:
        path: A checkpoint.pt of `pretexts train` ("pretrain"), one of `pretexts finetune` (checkpoint.pt:
            "finetune"; finetuned.pt or best.pt: "finetuned") or the segmenter.pt of `pretexts segment`.
        kinds: The kinds accepted (one kind's name alone is taken as that kind); None: any.

    Returns:
        The checkpoint's dict: `model` (the state dict), `config` (the run's settings, as config.json) and, by kind,
            the epoch, step, optimiser and random states `resume` reads, or a fine-tuned model's `timm` spec and
            `classes`.

    Raises:
        CheckpointError: The file is missing, a folder, unreadable, holds Python objects that are not weights, is
            of another format version or kind, holds values pretexts never writes (a tensor larger than its storage,
            values nested too deep), or its checksum does not match.
        ParameterError: `kinds` names a kind that is none of these.
    """
    if kinds is not None:
        kinds = checked_kinds(kinds)
    path = Path(path)
    if path.is_dir():
        inside = (
            "an export for timm (load it with timm.create_model)" if (path / "pretexts.json").is_file() else "a folder"
        )
        hint = f" Did you mean '{path / 'checkpoint.pt'}'?" if (path / "checkpoint.pt").is_file() else ""
        raise CheckpointError(
            f"'{path}' is {inside}, not a checkpoint; give the path of a checkpoint.pt written by `pretexts train`."
            + hint
        )
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint '{path}' does not exist; give the path of a checkpoint.pt written by `pretexts train`."
        )
    ckpt = read_weights(path)
    if not isinstance(ckpt, dict) or "model" not in ckpt or not isinstance(ckpt.get("config"), dict):
        raise CheckpointError(
            f"'{path}' is not a pretexts checkpoint (no model or config inside); give the checkpoint.pt written by "
            f"`pretexts train`."
        )
    version = ckpt.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint '{path}' has format version {version}; this pretexts reads version {FORMAT_VERSION}: "
            f"use the pretexts that wrote it, or train again."
        )
    if ckpt.get(CHECKSUM) != verified_checksum(ckpt, path):
        if CHECKSUM in ckpt:
            raise CheckpointError(f"checkpoint '{path}' is corrupted (checksum mismatch); {RECOVER}.")
        raise CheckpointError(
            f"checkpoint '{path}' has no checksum; write it with pretexts.engine.training.checkpoint.save_checkpoint."
        )
    if kinds is not None:
        check_kind(ckpt, path, kinds)
    return ckpt


def verified_checksum(ckpt: dict, path) -> str:
    """`checksum(ckpt)`, after refusing in one line what it must not touch (a file pretexts did not write)."""
    problem = unchecksummable(ckpt, Path(path).stat().st_size)
    if problem is None:
        try:
            return checksum(ckpt)
        except (RuntimeError, ValueError, TypeError, MemoryError, RecursionError) as err:
            problem = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
    raise CheckpointError(
        f"checkpoint '{path}' holds values pretexts never writes ({problem}), so it was not read "
        f"further; use a checkpoint written by pretexts that you trust."
    )


# What each kind of checkpoint is, which commands take it, and its short name.
KINDS = {
    "pretrain": (
        "a pretraining checkpoint (`pretexts train`)",
        "`pretexts train --resume`, finetune, probe, segment, restore, energy and export take it",
        "a checkpoint.pt of `pretexts train`",
    ),
    "finetune": (
        "a fine-tuning checkpoint (a fine-tuning run's checkpoint.pt)",
        "`pretexts finetune --resume` continues it and `pretexts export` exports it",
        "a fine-tuning run's checkpoint.pt",
    ),
    "finetuned": ("a fine-tuning checkpoint (finetuned.pt)", "`pretexts export` exports it", "a finetuned.pt"),
    "segmenter": (
        "a segmentation model (segmenter.pt of `pretexts segment`)",
        "`pretexts segment --resume` continues it",
        "a segmenter.pt",
    ),
}


def checked_kinds(kinds) -> tuple[str, ...]:
    """`kinds` as a tuple of known kinds (a name alone is that one kind); a ParameterError names the kinds there are."""
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds) if isinstance(kinds, (tuple, list, set)) else kinds
    wrong = next((k for k in kinds if k not in KINDS), None) if isinstance(kinds, tuple) and kinds else kinds
    if wrong is not None:
        close = suggest(wrong, KINDS) if isinstance(wrong, str) else ""
        raise ParameterError(f"load_checkpoint: kinds must name some of {', '.join(KINDS)}, got {wrong!r}.{close}")
    return kinds


def check_kind(ckpt: dict, path, kinds: tuple[str, ...]) -> None:
    kind = ckpt.get("kind", "pretrain")  # pretraining checkpoints carry no kind
    if kind not in kinds:
        what, takes, _ = KINDS.get(kind, (f"a checkpoint of kind {kind!r}", "no command reads it", ""))
        wanted = " or ".join(KINDS[k][2] for k in kinds)
        raise CheckpointError(f"'{path}' is {what}: {takes}; this command takes {wanted}.")
    if kind == "pretrain" and not isinstance(ckpt["config"].get("backbone"), str):
        raise CheckpointError(
            f"checkpoint '{path}' names no backbone in its config; give a checkpoint.pt written by `pretexts train`."
        )


def check_shapes(model: torch.nn.Module, state: dict, path, fix: str) -> None:
    """One line naming the first weight whose shape differs, instead of torch's line per mismatch."""
    own = model.state_dict()
    for key, value in state.items():
        if key in own and isinstance(value, torch.Tensor) and value.shape != own[key].shape:
            raise CheckpointError(
                f"checkpoint '{path}' does not fit this model: '{key}' is {list(value.shape)} in "
                f"the checkpoint, {list(own[key].shape)} in the model; {fix}"
            )


def load_weights(model: torch.nn.Module, state: dict, path, what: str, fix: str) -> None:
    """`model.load_state_dict(state)` (strict), any mismatch in one line: the first misshapen weight, or the
    missing and unexpected keys, naming `what` the model is."""
    check_shapes(model, state, path, fix)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(
            f"checkpoint '{path}' does not fit {what} ({' '.join(str(err).split())[:200]}); {fix}"
        ) from None


def rng_states() -> dict:
    """Every RNG's state as tensors and plain values, which the weights-only unpickler reads."""
    states = {
        "torch": torch.get_rng_state(),
        "numpy": numpy_state(np.random.get_state()),
        "python": python_state(random.getstate()),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    numpy = states["numpy"]
    np.random.set_state(
        (
            numpy["bit_generator"],
            numpy["key"].numpy().astype(np.uint32),
            numpy["pos"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    version, internal, gauss_next = states["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def numpy_state(state: tuple) -> dict:
    """np.random.get_state()'s tuple (MT19937, uint32 key, pos, has_gauss, cached_gaussian) without numpy types."""
    name, key, pos, has_gauss, cached = state
    return {
        "bit_generator": str(name),
        "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def python_state(state: tuple) -> list:
    version, internal, gauss_next = state
    return [int(version), [int(i) for i in internal], None if gauss_next is None else float(gauss_next)]
