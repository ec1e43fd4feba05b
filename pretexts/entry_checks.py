"""What a registry checks as an entry registers, so a wrong one is refused there, not where it is first used."""

import re
import sys

from .errors import ParameterError

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")  # one command-line word: --task NAME, a `pretexts list` pattern


def check_name(kind: str, name) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ParameterError(
            f"a {kind}'s name is letters, digits, '-', '_' and '.', starting with a letter (a command-line word); "
            f"got {name!r}."
        )


def check_entry(kind: str, base: str, name: str, entry) -> None:
    """`entry` subclasses `base` ("module:Class") where that module is loaded (a real entry has loaded it; a
    listing must not import torch for it), or is callable."""
    module, _, attr = base.partition(":")
    cls = getattr(sys.modules[module], attr) if module in sys.modules else None
    if not (callable(entry) if cls is None else isinstance(entry, type) and issubclass(entry, cls)):
        what = f"a {attr} subclass" if cls is not None else "a function or class"
        raise ParameterError(f"{kind} '{name}': {entry!r} is not {what}; register {what}.")
