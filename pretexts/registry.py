"""The registries, in one place: pretext tasks (`TASKS`), pretraining methods (`METHODS`) and evaluation probes
(`PROBES`), each filled by its built-ins at definition and by plugins through one entry-point group
(`pretexts.tasks`, `pretexts.methods`, `pretexts.probes`). Backbone aliases are no registry: they live with the
backbones (`pretexts.backbones.ALIASES`).

Nothing here imports torch: a registry imports its built-in modules on first use (`Registry.load`)."""

import fnmatch
import inspect
import os
import pkgutil
import re
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import distributions

from .errors import DuplicateNameError, UnknownNameError, suggest


def defined_at(cls) -> str:
    try:
        return f"{inspect.getsourcefile(cls)}:{inspect.getsourcelines(cls)[1]}"
    except (OSError, TypeError):
        return f"{cls.__module__}.{cls.__qualname__}"


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


def failing_line(err: BaseException) -> str:
    """'file.py:12', the innermost frame of the error: where in the plugin it failed."""
    frames = traceback.extract_tb(err.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "import"


@dataclass
class Registry:
    """Names -> classes (or functions) of one kind ("task", "method", "probe"), filled by `register` and by one
    entry-point group.

    Built-in modules are imported on first use, before any plugin, so a built-in name always wins."""

    kind: str
    group: str
    builtins: tuple = ()  # modules to import first; "package.*": all of its modules
    hint: str = ""  # ends an unknown name's error; {names} lists the known ones
    decorator: str = ""  # the name built-ins register with (read by `entries`)
    declares: tuple = ()  # the attributes a listing reads from an entry
    table: dict = field(default_factory=dict)
    broken: dict = field(default_factory=dict)  # entry-point name -> where and why it failed
    tracebacks: dict = field(default_factory=dict)
    shadowed: dict = field(default_factory=dict)  # entry-point name -> which built-in it clashed with
    plugin_of: dict = field(default_factory=dict)  # registered name -> 'package version'
    declared: dict = field(default_factory=dict)  # built-in name -> its module, read before it is imported
    loaded: bool = False
    plugins_loaded: bool = False

    def register(self, name: str):
        """Class decorator: makes the class creatable by `name`; a second class of that name is an error (also
        one a built-in module declares that is not imported yet, `entries`)."""

        def wrap(cls):
            old = self.table.get(name)
            builtin = self.declared.get(name) if old is None else None
            if old is not None and old is not cls or builtin is not None and builtin != cls.__module__:
                raise DuplicateNameError(
                    f"{self.kind} '{name}' is registered twice: "
                    f"{defined_at(old) if old is not None else builtin} and "
                    f"{defined_at(cls)}. Rename one of them."
                )
            self.table[name] = cls
            return cls

        return wrap

    def entries(self) -> dict:
        """Name -> entry, built-ins first, then plugins: what `pretexts list` shows. The built-ins are read from
        their source (`pretexts.declared`: a `Declared` each) when not imported yet, so listing imports no torch;
        where a built-in's source cannot be read, they are imported. Plugins are imported (third-party code)."""
        if not self.loaded and self.decorator:
            from .declared import Unreadable, read_builtins

            try:
                found = read_builtins(self.builtins, self.decorator, self.declares)
            except Unreadable:
                found = None
            if found is not None:
                ranked = {d.name: d for d in sorted(found, key=lambda d: self.rank(d.module))}
                self.declared = {name: d.module for name, d in ranked.items()}
                self.load_plugins()
                return {**ranked, **{name: e for name, e in self.table.items() if name not in ranked}}
        self.load()
        return dict(self.table)

    def load(self, force: bool = False) -> None:
        """Import the built-ins, then every entry point of the group once. A failing one is recorded as broken,
        with the file and line where it failed; one that registers a built-in's name is shadowed (said once)."""
        if self.loaded and not force:
            return
        for module in self.builtins:
            if module.endswith(".*"):  # every module of a package: a new file there registers itself
                package = import_module(module[:-2])
                for info in pkgutil.iter_modules(package.__path__):
                    import_module(f"{package.__name__}.{info.name}")
            else:
                import_module(module)
        ordered = sorted(self.table.items(), key=lambda item: self.rank(item[1].__module__))
        self.table.clear(), self.table.update(ordered)
        self.loaded = True
        self.load_plugins(force)

    def load_plugins(self, force: bool = False) -> None:
        """Every entry point of the group, once (see `load`)."""
        if self.plugins_loaded and not force:
            return
        self.plugins_loaded = True
        for ep in plugin_entry_points(self.group):
            package = f"{ep.dist.name} {ep.dist.version}" if getattr(ep, "dist", None) else ep.value
            before = dict(self.table)
            try:
                ep.load()
            except DuplicateNameError as err:
                self.shadowed[ep.name] = f"{package}: {err}"
                warnings.warn(
                    f"plugin {package} registers a {self.kind} name pretexts already has; the built-in wins. {err}",
                    stacklevel=3,
                )
            except (Exception, SystemExit) as err:  # a plugin's bug (or its sys.exit) must not break the built-ins
                self.broken[ep.name] = (
                    f"{package} ({ep.value}) failed at {failing_line(err)}: {type(err).__name__}: {err}"
                )
                self.tracebacks[ep.name] = "".join(traceback.format_exception(err))
            else:
                self.broken.pop(ep.name, None)
                added = [name for name in self.table if name not in before]
                for name in added:
                    self.plugin_of[name] = package
                if not added and not any(cls.__module__ == ep.module for cls in self.table.values()):
                    self.broken[ep.name] = f"{package} ({ep.value}) loaded but registered no {self.kind}"

    def rank(self, module: str) -> int:
        """Built-ins in the order listed, whoever came first: the listed module or package that holds `module`."""
        for i, listed in enumerate(self.builtins):
            if module == listed or module.startswith(listed + "."):
                return i
        return len(self.builtins)

    def get(self, name: str) -> type:
        self.load()
        if name in self.broken and name not in self.table:
            raise UnknownNameError(
                f"{self.kind} '{name}' comes from a plugin that failed to load: "
                f"{self.broken[name]}. Fix or reinstall the plugin; `pretexts --debug list` "
                f"shows its traceback."
            )
        if name not in self.table:
            hint = self.hint.format(names=", ".join(self.table))
            raise UnknownNameError(f"unknown {self.kind} '{name}'.{suggest(name, self.table)} {hint}".rstrip())
        return self.table[name]


# every module of pretexts/tasks/ ("*"): a new task is one file there; the listed ones set the listing's order
TASKS = Registry(
    "pretext task",
    "pretexts.tasks",
    tuple(
        f"pretexts.tasks.{m}"
        for m in ("masking", "super_resolution", "denoising", "colorization", "patch_sorting", "mixed", "*")
    ),
    hint="Run `pretexts list` to see all tasks.",
    decorator="register",
    declares=("params", "presets"),
)


# every module of engine/methods/ ("*"): a new method is one file there; the listed ones set the listing's order
METHODS = Registry(
    "method",
    "pretexts.methods",
    tuple(f"pretexts.engine.methods.{m}" for m in ("energy", "autoencoder", "mae", "*")),
    hint="Methods: {names} (`pretexts list --methods`).",
    decorator="register_method",
    declares=("method_params",),
)

PROBES = Registry(
    "probe",
    "pretexts.probes",
    ("pretexts.engine.evaluation.probe",),
    hint="Probes: {names} (`pretexts list --probes`).",
    decorator="register_probe",
)


def register(name: str):
    """Class decorator: `@register("colorization")` makes the class creatable by that name."""

    def wrap(cls):
        cls = TASKS.register(name)(cls)
        cls.name = name
        return cls

    return wrap


def load_plugins(force: bool = False) -> None:
    TASKS.load(force)


def plugin_of(name: str) -> str | None:
    """'pretexts-jpeg 0.1.0' for a task a plugin registered; None for a built-in."""
    TASKS.load()
    return TASKS.plugin_of.get(name)


def broken_plugins() -> dict[str, str]:
    """Plugins that failed to load: entry-point name -> where and why."""
    TASKS.load()
    return dict(TASKS.broken)


def broken_traceback(name: str) -> str:
    """The full traceback of a broken plugin, for `--debug`."""
    return TASKS.tracebacks.get(name, "")


def shadowed_plugins() -> dict[str, str]:
    """Plugins whose task name a built-in already has: entry-point name -> which and where."""
    TASKS.load()
    return dict(TASKS.shadowed)


def list_pretexts(pattern: str = "*") -> list[str]:
    """Registered task names matching a shell-style wildcard, sorted."""
    TASKS.load()
    return sorted(n for n in TASKS.table if fnmatch.fnmatch(n, pattern))


def get_pretext_class(name: str) -> type:
    return TASKS.get(name)


def create_pretext(name: str, **kwargs):
    """Build a task by name; None kwargs are dropped so CLI defaults never override a task's own."""
    return get_pretext_class(name)(**{k: v for k, v in kwargs.items() if v is not None})
