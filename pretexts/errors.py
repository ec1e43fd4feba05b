"""The errors a user can cause. The CLI turns each into a one-line message and exit code 2."""

import difflib


class PretextsError(Exception):
    """Base class of every user-facing error: bad names, parameters, data or checkpoints."""


class UnknownNameError(PretextsError, ValueError):
    """A task or backbone name that is not registered."""


class DuplicateNameError(PretextsError, ValueError):
    """Two definitions claim the same registry name."""


class ParameterError(PretextsError, ValueError):
    """A parameter that is unknown, of the wrong type or out of its allowed range."""


class DataError(PretextsError, ValueError):
    """A data path that is missing, empty or holds no readable image."""


class CheckpointError(PretextsError, ValueError):
    """A checkpoint that is missing, truncated or does not match the run."""


class OutputError(PretextsError, OSError):
    """An output folder that cannot be written: no permission, not a folder, or a full disk."""


class NonFiniteLossError(PretextsError, FloatingPointError):
    """A training loss that became NaN or infinite (usually a too high learning rate)."""


def suggest(name: str, choices, n: int = 3) -> str:
    """' Did you mean: a, b?' for the closest names, or '' when none is close. Case is ignored (`MAE` finds `mae`,
    which a ratio over the raw letters would not); the names are shown as registered."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(str(choice).lower(), str(choice))
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=n, cutoff=0.5)
    return f" Did you mean: {', '.join(by_lower[c] for c in close)}?" if close else ""
