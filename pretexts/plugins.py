"""Plugin discovery for the registries (`pretexts.registry.Registry`): the entry points of the distributions
installed on sys.path (never a `*.dist-info` folder in the working directory), and loading them into a registry,
where a failing one is recorded as broken (the file and line it failed at, its traceback) and one that registers a
built-in's name as shadowed; and what the task registry's plugins are (`broken_plugins`, ...). Imports no torch."""

import importlib
import os
import re
import sys
import traceback
import warnings
from importlib.metadata import distributions
from typing import TYPE_CHECKING

from .errors import DuplicateNameError
from .listing_cache import source_roots

if TYPE_CHECKING:
    from .registry import Registry


def installed_path() -> list[str]:
    """sys.path without the entries that only name the working directory: '' (`python -c`, the REPL) and the
    cwd that `python -m` and `torchrun -m` put first (also a script's own folder when the script lies in the
    cwd). Plugins come from installed distributions only, so a `*.dist-info` folder lying in the folder a
    command is started from never runs its code."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:  # the working directory was removed: nothing to exclude but ''
        cwd = None
    if cwd is not None and cwd in site_folders():  # started inside site-packages: that folder is installed
        cwd = None
    kept = []
    for entry in sys.path:
        if not isinstance(entry, str) or entry in ("", "."):
            continue
        try:
            if os.path.realpath(entry) == cwd:
                continue
        except (OSError, ValueError):
            continue
        kept.append(entry)
    return kept


def site_folders() -> set[str]:
    import site

    folders = list(getattr(site, "getsitepackages", list)())
    if getattr(site, "ENABLE_USER_SITE", False):
        folders.append(site.getusersitepackages())
    return {os.path.realpath(folder) for folder in folders}


def plugin_entry_points(group: str) -> list:
    """The entry points of `group` of the distributions installed on `installed_path()`; a distribution found
    twice counts once, the first on the path (as `importlib.metadata.entry_points` does)."""
    seen, found = set(), []
    for dist in distributions(path=installed_path()):
        try:
            name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
            eps = dist.entry_points
        except Exception:  # noqa: BLE001 - an unreadable METADATA is no plugin
            continue
        if name in seen:
            continue
        seen.add(name)
        found.extend(ep for ep in eps if ep.group == group)
    return found


def failing_line(err: BaseException, module: str = "") -> str:
    """'file.py:12', where in the plugin it failed: the innermost frame of the error outside importlib and pretexts
    (a refused registration raises in pretexts: the plugin's line is its decorator), else pretexts' innermost; the
    module's file where importlib alone failed (an entry point naming a missing attribute)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(IMPORTLIB)]
    frames = [f for f in frames if f.filename != __file__]  # load_one's own call
    own = tuple(os.path.join(root, "") for root in source_roots())
    outside = [f for f in frames if not os.path.realpath(f.filename).startswith(own)] or frames
    if outside:
        return f"{outside[-1].filename}:{outside[-1].lineno}"
    return getattr(sys.modules.get(module), "__file__", None) or "import"


IMPORTLIB = (os.path.dirname(importlib.__file__), "<frozen importlib")


def package_of(ep) -> str:
    """'pretexts-jpeg 0.1.0', the distribution an entry point is of (its value where that is unknown)."""
    return f"{ep.dist.name} {ep.dist.version}" if getattr(ep, "dist", None) else ep.value


def load_one(ep, tracebacks: dict[str, str] | None = None, raised: tuple[type[BaseException], ...] = ()) -> str | None:
    """Import entry point `ep`: None once it is, else why not in one line, '<package> (<value>) failed at
    <file>:<line>: <error>' (its traceback in `tracebacks` under the entry point's name). Every error is caught, as
    a plugin's bug (or its sys.exit) must not break the built-ins, but those of `raised`, which the caller says."""
    try:
        ep.load()
    except raised:
        raise
    except (Exception, SystemExit) as err:
        if tracebacks is not None:
            tracebacks[ep.name] = "".join(traceback.format_exception(err))
        return f"{package_of(ep)} ({ep.value}) failed at {failing_line(err, ep.module)}: {type(err).__name__}: {err}"
    return None


def load_entry_points(registry: "Registry") -> None:
    """Import every entry point of `registry.group` (`Registry.load_plugins`, which does it once): the names one
    registers are its plugin's (`registry.plugin_of`), also where it then fails; one that fails is broken
    (`registry.broken`, with where and why, and `registry.tracebacks`); one that registers a built-in's name is
    shadowed (`registry.shadowed`, said once in a warning)."""
    # stacklevel=4: the warning points at whoever called `Registry.load` (load_entry_points <- load_plugins <- load)
    for ep in plugin_entry_points(registry.group):
        package = package_of(ep)
        before, loaded = dict(registry.table), False
        try:
            why = load_one(ep, registry.tracebacks, raised=(DuplicateNameError,))
            loaded = why is None
            if why is not None:
                registry.broken[ep.name] = why
        except DuplicateNameError as err:
            registry.shadowed[ep.name] = f"{package}: {err}"
            warnings.warn(
                f"plugin {package} registers a {registry.kind} name pretexts already has; the built-in wins. {err}",
                stacklevel=4,
            )
        # not the built-ins a plugin imports (to subclass one) before `load` did: a listing imports none. Also what a
        # module registered before its entry point failed (a missing attribute): a later entry point finds it imported
        added = [n for n in registry.table if n not in before and not registry.is_builtin(registry.table[n].__module__)]
        for name in added:
            registry.plugin_of[name] = package
        if loaded:
            registry.broken.pop(ep.name, None)
            if not added and not any(cls.__module__ == ep.module for cls in registry.table.values()):
                registry.broken[ep.name] = f"{package} ({ep.value}) loaded but registered no {registry.kind}"


def tasks() -> "Registry":
    from .registry import TASKS  # the registry module imports this one

    return TASKS


def load_plugins(force: bool = False) -> None:
    """Load the built-in tasks and the task plugins (again, with `force`: one installed since)."""
    tasks().load(force)


def plugin_of(name: str) -> str | None:
    """'pretexts-jpeg 0.1.0' for a task a plugin registered; None for a built-in."""
    tasks().load()
    return tasks().plugin_of.get(name)


def broken_plugins() -> dict[str, str]:
    """Plugins that failed to load: entry-point name -> where and why."""
    tasks().load()
    return dict(tasks().broken)


def broken_traceback(name: str) -> str:
    """The full traceback of a broken plugin, for `--debug`."""
    return tasks().tracebacks.get(name, "")


def shadowed_plugins() -> dict[str, str]:
    """Plugins whose task name a built-in already has: entry-point name -> which and where."""
    tasks().load()
    return dict(tasks().shadowed)
