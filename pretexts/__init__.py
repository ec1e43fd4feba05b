"""pretexts: energy-inspired self-supervised pretraining (Wang et al., ICLR 2023) as a zoo of pretext tasks.

`import pretexts` stays light (no torch): the task base classes and the built-in tasks load on first use,
so `pretexts --help` answers at once. The whole Python API is reached from here: `pretexts.pretrain`,
`pretexts.PretrainConfig`, `pretexts.create_backbone`, ... (the engine's names, `pretexts.engine.API`), and the
installed subpackages `pretexts.engine`, `pretexts.backbones` and `pretexts.tasks`."""

from importlib import import_module

# re-exported (`__all__` is built when asked, in `__getattr__`)
from .errors import (  # noqa: F401
    CheckpointError,
    DataError,
    DuplicateNameError,
    NonFiniteLossError,
    OutputError,
    ParameterError,
    PretextsError,
    UnknownNameError,
)
from .params import Param  # noqa: F401
from .registry import broken_plugins, create_pretext, get_pretext_class, list_pretexts, register  # noqa: F401

__version__ = "0.1.0"

_LAZY = {
    "Corrupted": "base",
    "Pretext": "base",
    "create_backbone": "backbones",
    "list_backbones": "backbones",
}  # these import torch
_SUBPACKAGES = ("engine", "backbones", "tasks")


def __getattr__(name: str):
    if name == "__all__":  # asked by `from pretexts import *` alone: the engine's names too, which load torch
        return [*_NAMES, "create_backbone", "list_backbones", *import_module(".engine", __name__).API]
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    if name in _SUBPACKAGES:
        return import_module(f".{name}", __name__)
    engine = import_module(".engine", __name__)  # light: its names load on first use
    if name in engine.API:
        return getattr(engine, name)
    raise AttributeError(f"module 'pretexts' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBPACKAGES, *import_module(".engine", __name__).API})


_NAMES = [
    "Corrupted",
    "Pretext",
    "Param",
    "register",
    "list_pretexts",
    "create_pretext",
    "get_pretext_class",
    "broken_plugins",
    "PretextsError",
    "UnknownNameError",
    "DuplicateNameError",
    "ParameterError",
    "DataError",
    "CheckpointError",
    "OutputError",
    "NonFiniteLossError",
    "__version__",
]
