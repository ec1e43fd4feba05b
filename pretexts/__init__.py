"""pretexts: energy-inspired self-supervised pretraining (Wang et al., ICLR 2023) as a zoo of pretext tasks."""
from .base import Corrupted, Pretext
from .errors import (CheckpointError, DataError, DuplicateNameError, ParameterError, PretextsError,
                     UnknownNameError)
from .params import Param
from .registry import broken_plugins, create_pretext, get_pretext_class, list_pretexts, register

# built-in tasks register on import
from . import colorization, denoising, masking, mixed, patch_sorting, super_resolution  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "Corrupted", "Pretext", "Param", "register", "list_pretexts", "create_pretext", "get_pretext_class",
    "broken_plugins", "PretextsError", "UnknownNameError", "DuplicateNameError", "ParameterError",
    "DataError", "CheckpointError", "__version__",
]
