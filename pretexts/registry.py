"""The registries, in one place: pretext tasks (`TASKS`), pretraining methods (`METHODS`) and evaluation probes
(`PROBES`), each filled by its built-ins and by plugins through one entry-point group (`pretexts.tasks`,
`pretexts.methods`, `pretexts.probes`); backbone aliases are no registry (`pretexts.backbones.ALIASES`). Nothing
here imports torch: a registry imports its built-in modules on first use (`Registry.load`), and `pretexts list`
takes them from a cache while they are unchanged (`Registry.entries`, pretexts/listing_cache.py). Finding and
loading the plugins is pretexts/plugins.py; what an entry must be, pretexts/entry_checks.py."""

import fnmatch
import pkgutil
import sys
from dataclasses import dataclass, field
from importlib import import_module

from .entry_checks import check_entry, check_hooks, check_name, check_unique
from .errors import UnknownNameError, suggest
from .plugins import broken_plugins as broken_plugins  # the task plugins' queries, importable from here
from .plugins import broken_traceback as broken_traceback
from .plugins import load_entry_points
from .plugins import load_plugins as load_plugins
from .plugins import plugin_of as plugin_of
from .plugins import shadowed_plugins as shadowed_plugins


@dataclass
class Registry:
    """Names -> classes (or functions) of one kind ("task", "method", "probe"), filled by `register` and by one
    entry-point group.

    Built-in modules are imported on first use, before any plugin, so a built-in name always wins. pretexts has
    three: `TASKS` (filled by `pretexts.register`), `METHODS` (`pretexts.engine.register_method`) and `PROBES`
    (`register_probe` in `pretexts.engine.evaluation.probe`).

    Args:
        kind: What an entry is, in messages ("pretext task").
        group: The entry-point group plugin packages register through ("pretexts.tasks").
        builtins: Modules imported before any plugin; "package.*" imports every module of the package.
        hint: Ends an unknown name's error; `{names}` lists the known ones.

    Examples:
        >>> from pretexts.registry import Registry
        >>> widgets = Registry("widget", "example.widgets")
        >>> @widgets.register("spanner")
        ... class Spanner:
        ...     '''Turns nuts.'''
        >>> widgets.get("spanner").__name__
        'Spanner'
    """

    kind: str
    group: str
    builtins: tuple = ()  # modules to import first; "package.*": all of its modules
    hint: str = ""  # ends an unknown name's error; {names} lists the known ones
    declares: tuple = ()  # the attributes a listing reads from an entry
    cached: bool = False  # `entries` may cache the built-ins: pretexts' own modules (the cache's key is their files)
    base: str = ""  # "module:Class" every entry must subclass (imported when one registers); "": any callable
    hooks: tuple = ()  # the methods of `base` an entry must override ("a|b": one of them)
    list_flag: str = ""  # the `pretexts list` flag that lists this kind ("--methods")
    table: dict = field(default_factory=dict)
    broken: dict = field(default_factory=dict)  # entry-point name -> where and why it failed
    tracebacks: dict = field(default_factory=dict)
    shadowed: dict = field(default_factory=dict)  # entry-point name -> which built-in it clashed with
    plugin_of: dict = field(default_factory=dict)  # registered name -> 'package version'
    declared: dict = field(default_factory=dict)  # built-in name -> its module, from the cache before it is imported
    loaded: bool = False
    plugins_loaded: bool = False

    def register(self, name: str):
        """Class decorator: makes the class creatable by `name`; a second class of that name is an error (also
        one a built-in module declares that is not imported yet: `declared`, filled by `entries`), while a new
        definition of the same class (same module and qualified name: a re-run notebook cell) replaces it, warning.

        Args:
            name: The name the class is created and listed by.

        Returns:
            (Callable[[type], type]): The decorator, which returns the class it registers unchanged.

        Raises:
            DuplicateNameError: Another class has the name; a class from outside the built-ins loads them first, so
                a built-in's name is refused here (ParameterError: a name or class of the wrong kind, or a class
                missing one of the `hooks`).

        Examples:
            >>> from pretexts.registry import Registry
            >>> widgets = Registry("widget", "example.widgets")
            >>> Spanner = widgets.register("spanner")(type("Spanner", (), {}))
            >>> widgets.register("spanner")(type("Wrench", (), {}))
            Traceback (most recent call last):
            ...
            pretexts.errors.DuplicateNameError: widget 'spanner' is registered twice: ... Rename one of them.
        """

        check_name(self.kind, name)  # now, not when the decorator is applied

        def wrap(cls):
            check_entry(self.kind, self.base, name, cls)
            if not self.is_builtin(cls.__module__) and not self.declared:
                self.load_builtins()  # a built-in's name is refused now, not as the built-ins load later
            check_unique(self, name, cls)
            check_hooks(self.kind, self.base, name, cls, self.hooks)
            self.table[name] = cls
            return cls

        return wrap

    def entries(self) -> dict:
        """Name -> entry, built-ins first, then plugins: what `pretexts list` shows.

        Each built-in is a `pretexts.listing_cache.Listed` (its module, summary and `declares` attributes). A
        `cached` registry whose built-ins are not imported yet takes them from the listing cache, so a listing
        imports no torch; on a miss (a first listing, a changed source file, a new version) they are imported once
        and the cache refilled. Plugins are imported on every call (third-party code) and come as their classes.

        Examples:
            >>> from pretexts.registry import METHODS
            >>> "energy" in METHODS.entries()
            True
        """
        from .listing_cache import Listed, ListingCache

        cache = ListingCache(self.group) if self.cached and not self.loaded else None
        listed = cache.read() if cache else None
        if listed is None:
            self.load()
            listed = {
                name: Listed.of(name, entry, self.declares)
                for name, entry in self.table.items()
                if self.is_builtin(entry.__module__)  # not a plugin's, nor one a script registered
            }
            if cache:
                cache.write(list(listed.values()))
        else:
            self.declared = {name: entry.module for name, entry in listed.items()}
            self.load_plugins()
        return {**listed, **{name: entry for name, entry in self.table.items() if name not in listed}}

    def load(self, force: bool = False) -> None:
        """Import the built-ins, then every entry point of the group once. A failing one is recorded as broken,
        with the file and line where it failed; one that registers a built-in's name is shadowed (said once).

        Args:
            force: Import the built-ins and the entry points again (a plugin installed since the last load).

        Examples:
            >>> from pretexts.registry import PROBES
            >>> PROBES.load()
            >>> {"linear", "mlp", "knn"} <= set(PROBES.table)
            True
        """
        self.load_builtins(force)
        self.load_plugins(force)

    def load_builtins(self, force: bool = False) -> None:
        """Import the built-in modules once (`load` without the plugins)."""
        if self.loaded and not force:
            return
        try:
            for module in self.builtins:
                if module.endswith(".*"):  # every module of a package: a new file there registers itself
                    package = import_module(module[:-2])
                    for info in pkgutil.iter_modules(package.__path__):
                        import_module(f"{package.__name__}.{info.name}")
                else:
                    import_module(module)
        except BaseException:
            # a module that failed runs again on the next load: what it registered would clash with itself
            for name, entry in list(self.table.items()):
                if self.is_builtin(entry.__module__) and entry.__module__ not in sys.modules:
                    del self.table[name]
            raise
        ordered = sorted(self.table.items(), key=lambda item: self.rank(item[1].__module__))
        self.table.clear(), self.table.update(ordered)
        self.loaded = True

    def load_plugins(self, force: bool = False) -> None:
        """Every entry point of the group, once (see `load`)."""
        if self.plugins_loaded and not force:
            return
        self.plugins_loaded = True
        load_entry_points(self)

    def rank(self, module: str) -> int:
        """Built-ins in the order listed, whoever came first: the listed module or package that holds `module`."""
        for i, listed in enumerate(self.builtins):
            holder = listed.removesuffix(".*")  # "package.*": every module of the package is built in
            if module == holder or module.startswith(holder + "."):
                return i
        return len(self.builtins)

    def is_builtin(self, module: str) -> bool:
        """Whether `module` is (in) one of the built-in modules."""
        return self.rank(module) < len(self.builtins)

    def get(self, name: str) -> type:
        """The class (or function) registered as `name`, after loading the built-ins and plugins.

        Args:
            name: A registered name.

        Returns:
            What was registered under `name`.

        Raises:
            UnknownNameError: No entry has the name (the message suggests close names), or the plugin that
                would register it failed to load (the message says where and why).

        Examples:
            >>> from pretexts.registry import METHODS
            >>> METHODS.get("energy").__name__
            'EnergyMethod'
            >>> METHODS.get("enrgy")
            Traceback (most recent call last):
            ...
            pretexts.errors.UnknownNameError: unknown method 'enrgy'. Did you mean: energy? Methods: ...
        """
        self.load()
        if name in self.broken and name not in self.table:
            raise UnknownNameError(
                f"{self.kind} '{name}' comes from a plugin that failed to load: "
                f"{self.broken[name]}. Fix or reinstall the plugin; "
                f"`{f'pretexts --debug list {self.list_flag}'.rstrip()}` shows its traceback."
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
    declares=("params", "presets"),
    cached=True,
    base="pretexts.base:Pretext",
    hooks=("apply|corrupt",),
)
"""The pretext tasks: `pretexts.register` adds one, plugin packages through the entry-point group `pretexts.tasks`;
`create_pretext`, `list_pretexts` and `get_pretext_class` read it."""


# every module of engine/methods/ ("*"): a new method is one file there; the listed ones set the listing's order
METHODS = Registry(
    "method",
    "pretexts.methods",
    tuple(f"pretexts.engine.methods.{m}" for m in ("energy", "autoencoder", "mae", "*")),
    hint="Methods: {names} (`pretexts list --methods`).",
    declares=("method_params",),
    cached=True,
    base="pretexts.engine.methods.base:Method",
    hooks=("build_model", "loss", "held_out_error", "figure"),
    list_flag="--methods",
)
"""The pretraining methods (`pretexts.engine.Method` subclasses): `pretexts.engine.register_method` adds one, plugin
packages through the entry-point group `pretexts.methods`; `pretexts train --method NAME` trains it."""

PROBES = Registry(
    "probe",
    "pretexts.probes",
    ("pretexts.engine.evaluation.probe",),
    hint="Probes: {names} (`pretexts list --probes`).",
    declares=("params",),
    cached=True,
    list_flag="--probes",
)
"""The frozen-feature probes: `register_probe` (in `pretexts.engine.evaluation.probe`) adds one, plugin packages
through the entry-point group `pretexts.probes`; `pretexts probe --probe NAME` runs it."""


def register(name: str):
    """Class decorator: `@register("colorization")` makes the class creatable by that name.

    The class (a `Pretext` subclass) gets `name` as its `name` attribute, and its docstring's first paragraph is
    its summary in `pretexts list`. A plugin package also exposes the class under the entry-point group
    `pretexts.tasks`, so that `pretexts` finds it without being told to import it.

    Args:
        name: The task's name, for `create_pretext`, `pretexts train --task` and `pretexts list`.

    Returns:
        (Callable[[type], type]): The decorator, which returns the class with `name` set.

    Raises:
        DuplicateNameError: Another task has the name (a built-in's included); the message names both classes. A
            new definition of the same class (a re-run cell) replaces it with a warning.
        ParameterError: The name is no command-line word, or the class no `Pretext` subclass or one defining
            neither `apply` nor `corrupt`.

    Examples:
        >>> import torch
        >>> from pretexts import Corrupted, Pretext, create_pretext, register
        >>> @register("invert-colours")
        ... class InvertColours(Pretext):
        ...     '''Invert every pixel; restoration inverts them back.'''
        ...
        ...     def apply(self, images, params):
        ...         return Corrupted(state=1 - images, target=images)
        >>> InvertColours.name, InvertColours.summary()
        ('invert-colours', 'Invert every pixel; restoration inverts them back.')
        >>> sample = create_pretext("invert-colours")(torch.zeros(2, 3, 8, 8))
        >>> bool((sample.state == 1).all())
        True
    """

    decorate = TASKS.register(name)  # a bad name is refused here, before a class is given

    def wrap(cls):
        cls = decorate(cls)
        cls.name = name
        return cls

    return wrap


def list_pretexts(pattern: str = "*") -> list[str]:
    """Registered task names matching a shell-style wildcard, sorted.

    Args:
        pattern: A shell-style wildcard (`*`, `?`, `[seq]`) matched against whole names.

    Returns:
        The names of the built-in tasks and of the installed plugins' that match, sorted.

    Examples:
        >>> from pretexts import list_pretexts
        >>> list_pretexts("*-mask")
        ['gridded-mask', 'random-mask']
    """
    TASKS.load()
    return sorted(n for n in TASKS.table if fnmatch.fnmatch(n, pattern))


def get_pretext_class(name: str) -> type:
    """The task class registered as `name`, whose declarations can be read without building a task.

    Args:
        name: A task name, as `list_pretexts` gives it.

    Returns:
        The `Pretext` subclass.

    Raises:
        UnknownNameError: No task has the name (close names are suggested), or the plugin that registers it
            failed to load.

    Examples:
        >>> from pretexts import get_pretext_class
        >>> SuperResolution = get_pretext_class("super-resolution")
        >>> SuperResolution.params["scale"].default  # the paper's 16 at 224 px (Table 2)
        16
    """
    return TASKS.get(name)


def create_pretext(name: str, **kwargs):
    """Build a task by name; a parameter given as None keeps the task's own value (a CLI option left unset), but
    its name is checked first: an unknown one is refused even without a value (YAML's `{scale:8}` is 'scale:8').

    Args:
        name: A task name, as `list_pretexts` gives it (a built-in or a plugin's).
        **kwargs (Any): `preset=` one of the task's presets, and values of the parameters it declares (its `params`,
            `pretexts list -v`), over the preset's; strings are converted, as from the command line.

    Returns:
        (Pretext): The task: `task(images, generator)` corrupts a batch into a `Corrupted`.

    Raises:
        UnknownNameError: No task has the name; the message suggests close names.
        ParameterError: An unknown preset or parameter (the message lists the valid ones), or a value outside
            its declared range.

    Examples:
        >>> import torch
        >>> from pretexts import create_pretext
        >>> task = create_pretext("random-mask", preset="small", fill="black", count=None)
        >>> task.fill, task.count  # count=None leaves the preset's (Table 1's Random small)
        ('black', 75)
        >>> sample = task(torch.rand(2, 3, 32, 32), torch.Generator().manual_seed(0))
        >>> sample.state.shape, sample.info["mask"].shape
        (torch.Size([2, 3, 32, 32]), torch.Size([2, 32, 32]))
        >>> create_pretext("random-mask", ratio=0.5)
        Traceback (most recent call last):
        ...
        pretexts.errors.ParameterError: random-mask: unknown parameter 'ratio'; valid parameters: count, low, ...
    """
    cls = get_pretext_class(name)
    return cls(**{k: v for k, v in kwargs.items() if v is not None or k not in cls.params and k != "preset"})
