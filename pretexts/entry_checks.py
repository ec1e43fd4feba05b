"""What a registry checks as an entry registers, so a wrong one is refused there, not where it is first used: its
name, its kind, the hooks it must override, and that no other entry (a built-in's above all) has its name."""

import inspect
import re
import sys
import warnings
from typing import TYPE_CHECKING

from .errors import DuplicateNameError, ParameterError

if TYPE_CHECKING:
    from .registry import Registry

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")  # one command-line word: --task NAME, a `pretexts list` pattern


def check_name(kind: str, name) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ParameterError(
            f"a {kind}'s name is letters, digits, '-', '_' and '.', starting with a letter (a command-line word); "
            f"got {name!r}."
        )


def loaded_base(base: str):
    """The class `base` ("module:Class") names where its module is loaded (a real entry has loaded it; a listing
    must not import torch for it), else None."""
    module, _, attr = base.partition(":")
    return getattr(sys.modules[module], attr) if module in sys.modules else None


def check_entry(kind: str, base: str, name: str, entry) -> None:
    """`entry` subclasses `base` where that is loaded (`loaded_base`), or is callable."""
    cls = loaded_base(base)
    if not (callable(entry) if cls is None else isinstance(entry, type) and issubclass(entry, cls)):
        what = f"a {cls.__name__} subclass" if cls is not None else "a function or class"
        raise ParameterError(f"{kind} '{name}': {entry!r} is not {what}; register {what}.")


def check_hooks(kind: str, base: str, name: str, entry, hooks: tuple) -> None:
    """`entry` overrides each of `hooks` ("a|b": one of them) of `base`, so a class missing one is refused as it
    registers, not by the NotImplementedError of a run that already wrote its files."""
    cls = loaded_base(base)
    if cls is None or not isinstance(entry, type):
        return
    missing = [
        hook
        for hook in hooks
        if all(getattr(entry, h, None) is getattr(cls, h, None) for h in hook.split("|"))  # inherited: not its own
    ]
    if missing:
        said = ", ".join(" or ".join(f"`{h}`" for h in hook.split("|")) for hook in missing)
        raise ParameterError(
            f"{kind} '{name}': {entry.__name__} does not define {said}, which a {cls.__name__} must define (the "
            "rest have defaults; docs/plugins.md has a complete one)."
        )


def check_unique(registry: "Registry", name: str, entry) -> None:
    """No other entry has `name`, nor does a built-in module declare it that is not imported yet (`declared`). One
    that takes a built-in's name is told so, and to pick another: the built-in keeps it. A new definition of the
    same class (same module and qualified name: a re-run notebook cell, a reloaded module) replaces the old one
    with a warning, as timm's `register_model` does."""
    old = registry.table.get(name)
    first = registry.declared.get(name) if old is None else old.__module__
    if first is None or old is entry or old is None and first == entry.__module__:
        return
    if old is not None and redefines(old, entry):
        warnings.warn(
            f"{registry.kind} '{name}' is registered again by a new definition of {entry.__module__}."
            f"{entry.__qualname__} (a re-run cell or a reloaded module); the new one replaces the old.",
            stacklevel=caller_level(),
        )
        return
    where = defined_at(old) if old is not None else first
    if registry.is_builtin(first) and not registry.is_builtin(entry.__module__):
        raise DuplicateNameError(
            f"{registry.kind} '{name}' is registered twice: the built-in ({where}) and {entry.__name__} "
            f"({defined_at(entry)}); the built-in keeps its name: register {entry.__name__} under another, such as "
            f"'my-{name}'."
        )
    raise DuplicateNameError(
        f"{registry.kind} '{name}' is registered twice: {where} and {defined_at(entry)}. Rename one of them."
    )


def redefines(old, entry) -> bool:
    """Whether `entry` is a new definition of `old`: the same module and qualified name (two different classes of
    one name in one module, or in two modules, are a real clash)."""
    qualname = getattr(entry, "__qualname__", None)
    return old.__module__ == entry.__module__ and qualname is not None and getattr(old, "__qualname__", "") == qualname


def caller_level() -> int:
    """The `warnings.warn` stacklevel of the first frame outside pretexts: the user's decorator line."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "pretexts":
        frame, level = frame.f_back, level + 1
    return level


def defined_at(cls) -> str:
    """Where `cls` is defined ('file:line'), for an error naming two entries of one name."""
    try:
        return f"{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return f"{cls.__module__}.{cls.__qualname__}"
