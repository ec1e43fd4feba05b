"""The task registry: built-ins register at definition, plugins through the `pretexts.tasks` entry points."""
import fnmatch
import inspect
from importlib.metadata import entry_points

from .errors import DuplicateNameError, UnknownNameError, suggest

ENTRY_POINT_GROUP = "pretexts.tasks"

_TASKS: dict[str, type] = {}
_BROKEN: dict[str, str] = {}
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
    """Import every `pretexts.tasks` entry point once; a failing one is recorded as broken."""
    global _plugins_loaded
    if _plugins_loaded and not force:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _TASKS and _TASKS[ep.name].__module__ == ep.module:
            continue
        try:
            ep.load()
        except (Exception, SystemExit) as err:  # a plugin's bug (or its sys.exit) must not break the built-ins
            _BROKEN[ep.name] = f"{ep.value}: {type(err).__name__}: {err}"
        else:
            _BROKEN.pop(ep.name, None)
            if ep.name not in _TASKS:
                _BROKEN[ep.name] = f"{ep.value}: loaded but registered no task named '{ep.name}'"


def broken_plugins() -> dict[str, str]:
    """Plugins that failed to load: entry-point name -> error."""
    load_plugins()
    return dict(_BROKEN)


def list_pretexts(pattern: str = "*") -> list[str]:
    """Registered task names matching a shell-style wildcard, sorted."""
    load_plugins()
    return sorted(n for n in _TASKS if fnmatch.fnmatch(n, pattern))


def get_pretext_class(name: str) -> type:
    load_plugins()
    if name not in _TASKS:
        broken = f" (plugin failed to load: {_BROKEN[name]})" if name in _BROKEN else ""
        raise UnknownNameError(
            f"unknown pretext task '{name}'{broken}.{suggest(name, _TASKS)} "
            f"Run `pretexts list` to see all tasks.")
    return _TASKS[name]


def create_pretext(name: str, **kwargs):
    """Build a task by name; None kwargs are dropped so CLI defaults never override a task's own."""
    return get_pretext_class(name)(**{k: v for k, v in kwargs.items() if v is not None})
