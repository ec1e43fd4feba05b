"""pretexts: energy-inspired self-supervised pretraining (Wang et al., ICLR 2023) as a zoo of pretext tasks.

`import pretexts` stays light (no torch): the task base classes and the built-in tasks load on first use,
so `pretexts --help` answers at once."""
from importlib import import_module

from .errors import (CheckpointError, DataError, DuplicateNameError, ParameterError, PretextsError,
                     UnknownNameError)
from .params import Param
from .registry import broken_plugins, create_pretext, get_pretext_class, list_pretexts, register

__version__ = "0.1.0"

_LAZY = {"Corrupted": "base", "Pretext": "base"}  # these import torch


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'pretexts' has no attribute '{name}'")


__all__ = [
    "Corrupted", "Pretext", "Param", "register", "list_pretexts", "create_pretext", "get_pretext_class",
    "broken_plugins", "PretextsError", "UnknownNameError", "DuplicateNameError", "ParameterError",
    "DataError", "CheckpointError", "__version__",
]
