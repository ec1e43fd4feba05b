"""The task registry: built-ins register at definition, plugins through the `pretexts.tasks` entry points."""
import fnmatch
import inspect
import traceback
import warnings
from importlib import import_module
from importlib.metadata import entry_points

from .errors import DuplicateNameError, UnknownNameError, suggest

ENTRY_POINT_GROUP = "pretexts.tasks"
# imported on first use (they import torch and kornia); they register at definition
BUILTIN_MODULES = ("colorization", "denoising", "masking", "mixed", "patch_sorting", "super_resolution")

_TASKS: dict[str, type] = {}
_BROKEN: dict[str, str] = {}
_TRACEBACKS: dict[str, str] = {}
_SHADOWED: dict[str, str] = {}
_PLUGIN_OF: dict[str, str] = {}
_plugins_loaded = False


def _where(cls) -> str:
    try:
        return f"{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return f"{cls.__module__}.{cls.__qualname__}"


def register(name: str):
    """Class decorator: `@register("colorization")` makes the class creatable by that name."""

    def wrap(cls):
        old = _TASKS.get(name)
        if old is not None and old is not cls:
            raise DuplicateNameError(
                f"pretext '{name}' is registered twice: {_where(old)} and {_where(cls)}. Rename one of them.")
        cls.name = name
        _TASKS[name] = cls
        return cls

    return wrap


def load_plugins(force: bool = False) -> None:
    """Import every `pretexts.tasks` entry point once. A failing one is recorded as broken, with the file and
    line where it failed; one that registers a built-in's name is shadowed: the built-in wins, said once."""
    global _plugins_loaded
    if _plugins_loaded and not force:
        return
    for module in BUILTIN_MODULES:  # before any plugin, so a built-in name always wins
        import_module(f"pretexts.{module}")
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        package = f"{ep.dist.name} {ep.dist.version}" if getattr(ep, "dist", None) else ep.value
        before = dict(_TASKS)
        try:
            ep.load()
        except DuplicateNameError as err:
            _SHADOWED[ep.name] = f"{package}: {err}"
            warnings.warn(f"plugin {package} registers a task name pretexts already has; the built-in wins. {err}",
                          stacklevel=2)
        except (Exception, SystemExit) as err:  # a plugin's bug (or its sys.exit) must not break the built-ins
            _BROKEN[ep.name] = f"{package} ({ep.value}) failed at {failing_line(err)}: {type(err).__name__}: {err}"
            _TRACEBACKS[ep.name] = "".join(traceback.format_exception(err))
        else:
            _BROKEN.pop(ep.name, None)
            added = [name for name in _TASKS if name not in before]
            for name in added:
                _PLUGIN_OF[name] = package
            if not added and not any(_TASKS[n].__module__ == ep.module for n in _TASKS):
                _BROKEN[ep.name] = f"{package} ({ep.value}) loaded but registered no task"


def failing_line(err: BaseException) -> str:
    """'file.py:12', the innermost frame of the error: where in the plugin it failed."""
    frames = traceback.extract_tb(err.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "import"


def plugin_of(name: str) -> str | None:
    """'pretexts-jpeg 0.1.0' for a task a plugin registered; None for a built-in."""
    load_plugins()
    return _PLUGIN_OF.get(name)


def broken_plugins() -> dict[str, str]:
    """Plugins that failed to load: entry-point name -> where and why."""
    load_plugins()
    return dict(_BROKEN)


def broken_traceback(name: str) -> str:
    """The full traceback of a broken plugin, for `--debug`."""
    return _TRACEBACKS.get(name, "")


def shadowed_plugins() -> dict[str, str]:
    """Plugins whose task name a built-in already has: entry-point name -> which and where."""
    load_plugins()
    return dict(_SHADOWED)


def list_pretexts(pattern: str = "*") -> list[str]:
    """Registered task names matching a shell-style wildcard, sorted."""
    load_plugins()
    return sorted(n for n in _TASKS if fnmatch.fnmatch(n, pattern))


def get_pretext_class(name: str) -> type:
    load_plugins()
    if name in _BROKEN and name not in _TASKS:
        raise UnknownNameError(f"pretext task '{name}' comes from a plugin that failed to load: {_BROKEN[name]}. "
                               f"Fix or reinstall the plugin; `pretexts --debug list` shows its traceback.")
    if name not in _TASKS:
        raise UnknownNameError(
            f"unknown pretext task '{name}'.{suggest(name, _TASKS)} Run `pretexts list` to see all tasks.")
    return _TASKS[name]


def create_pretext(name: str, **kwargs):
    """Build a task by name; None kwargs are dropped so CLI defaults never override a task's own."""
    return get_pretext_class(name)(**{k: v for k, v in kwargs.items() if v is not None})
