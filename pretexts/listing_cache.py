"""What the built-in tasks, methods and probes declare (name, module, summary, parameters, presets), cached so that
`pretexts list` imports no torch: the built-in modules import it, which takes seconds.

One JSON file per registry and installation, in `$XDG_CACHE_HOME/pretexts` (default ~/.cache/pretexts). Its key is
pretexts' version and the size and modification time of every source file of pretexts (an editable install that
changes a task, or a new file in pretexts/tasks/, refreshes it). A missing, stale or unreadable file is refilled by
one real import of the built-ins; where the folder cannot be written, every listing imports them. Plugins are never
cached: they are imported on every listing, so a broken one is always listed as broken."""

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field, fields
from importlib import import_module
from importlib.util import find_spec

from .params import Param

FORMAT = 1  # raise when the file's layout changes
SOURCE_PACKAGES = ("pretexts", "pretexts.engine", "pretexts.backbones")  # pretexts' installed namespace
KINDS = {kind.__name__: kind for kind in (int, float, str, bool, tuple, list, dict)}  # a Param's `kind`
PLAIN = (type(None), bool, int, float, str)  # JSON keeps these as they are (1, 1.0 and True apart)


@dataclass
class Listed:
    """One registered entry as a listing shows it: `attrs` holds the attributes the registry `declares` (`params`,
    `method_params`, `presets`) as the class or function has them."""

    name: str
    module: str
    summary: str
    attrs: dict = field(default_factory=dict)

    def __getattr__(self, key):
        try:
            return self.__dict__["attrs"][key]
        except KeyError:
            raise AttributeError(key) from None

    @classmethod
    def of(cls, name: str, entry, declares: tuple) -> "Listed":
        """`entry` (a registered class or function) as listed."""
        return cls(name, entry.__module__, summary_of(entry), {a: getattr(entry, a, None) or {} for a in declares})


def summary_of(entry) -> str:
    """A task's `summary()`, a method's own `summary` line, else the docstring's first paragraph on one line (a
    probe's): its first line alone may stop mid-sentence."""
    if isinstance(entry, Listed):
        return entry.summary
    summary = getattr(entry, "summary", None)
    if callable(summary):
        return summary()
    own = vars(entry).get("summary") if isinstance(entry, type) else None  # not inherited: the base's is empty
    if isinstance(own, str) and own:
        return own
    return first_paragraph(entry.__doc__)


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph on one line: a summary (its first line alone may stop mid-sentence)."""
    return " ".join(re.split(r"\n\s*\n", (doc or "").strip())[0].split())


class Uncacheable(TypeError):
    """A declared value JSON cannot hold exactly; that registry's listing then imports its built-ins each time."""


def encode(value):
    """`value` as JSON: plain values as they are, lists as lists, anything else as a one-key object naming its type
    (tuples, dicts with any keys, a Param of a class of pretexts' own, whose files the key covers, a Param's kind)."""
    if type(value) in PLAIN:
        return value
    if type(value) is list:
        return [encode(item) for item in value]
    if type(value) is tuple:
        return {"tuple": [encode(item) for item in value]}
    if type(value) is dict:
        return {"dict": [[encode(key), encode(item)] for key, item in value.items()]}
    if isinstance(value, Param) and type(value).__module__.partition(".")[0] == "pretexts":
        kind = type(value)
        return {
            "param": {
                "class": f"{kind.__module__}:{kind.__qualname__}",
                "fields": {f.name: encode(getattr(value, f.name)) for f in fields(kind)},
            }
        }
    if isinstance(value, type) and KINDS.get(value.__name__) is value:
        return {"type": value.__name__}
    raise Uncacheable(f"{type(value).__name__}: {value!r}")


def decode(value):
    """The inverse of `encode`."""
    if isinstance(value, list):
        return [decode(item) for item in value]
    if not isinstance(value, dict):
        return value
    ((tag, body),) = value.items()
    if tag == "tuple":
        return tuple(decode(item) for item in body)
    if tag == "dict":
        return {decode(key): decode(item) for key, item in body}
    if tag == "param":  # its module imports no torch (the probes' WholeNumbers lie in their torch-free config)
        module, _, name = body["class"].partition(":")
        kind = import_module(module)
        for part in name.split("."):
            kind = getattr(kind, part)
        if not (isinstance(kind, type) and issubclass(kind, Param)):
            raise ValueError(f"{body['class']} is no Param")
        return kind(**{key: decode(item) for key, item in body["fields"].items()})
    if tag == "type":
        return KINDS[body]
    raise ValueError(f"unknown tag {tag!r}")


def source_roots() -> list[str]:
    """The folders of pretexts' installed packages, found without importing any but `pretexts` (which imports no
    torch); engine/ and backbones/ lie outside pretexts/ in an editable install (setuptools' package-dir)."""
    roots = set()
    for package in SOURCE_PACKAGES:
        spec = find_spec(package)
        roots.update(os.path.realpath(folder) for folder in (spec and spec.submodule_search_locations or []))
    return sorted(roots)


def source_files(roots: list[str]) -> list[tuple[str, int, int]]:
    """(path, size, mtime in ns) of every .py file of the packages under `roots` (folders with an __init__.py:
    data folders and __pycache__ are skipped), sorted."""
    found = set()

    def visit(folder: str) -> None:
        for item in os.scandir(folder):
            if item.is_dir() and os.path.isfile(os.path.join(item.path, "__init__.py")):
                visit(item.path)
            elif item.name.endswith(".py") and item.is_file():
                stat = item.stat()
                found.add((item.path, stat.st_size, stat.st_mtime_ns))

    for root in roots:
        visit(root)
    return sorted(found)


def cache_folder() -> str:
    """$XDG_CACHE_HOME/pretexts, or ~/.cache/pretexts (a relative XDG_CACHE_HOME is ignored, as the spec says)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pretexts")


class ListingCache:
    """The cached built-ins of one registry (`group`: its entry-point group), for the sources under `roots`.
    The key is taken when the cache is made: before a miss imports the built-ins."""

    def __init__(self, group: str, roots: list[str] | None = None):
        from . import __version__

        roots = source_roots() if roots is None else roots
        where = hashlib.sha256("\n".join(roots).encode()).hexdigest()[:16]  # one file per installation
        self.path = os.path.join(cache_folder(), f"{group}-{where}.json")
        files = "\n".join(f"{path} {size} {mtime}" for path, size, mtime in source_files(roots))
        self.key = {"format": FORMAT, "pretexts": __version__, "sources": hashlib.sha256(files.encode()).hexdigest()}

    def read(self) -> dict[str, Listed] | None:
        """Name -> `Listed`, in the registry's order; None when the file is missing, stale or unreadable."""
        try:
            with open(self.path, encoding="utf-8") as file:
                stored = json.load(file)
            if stored["key"] != self.key:
                return None
            listed = [Listed(e["name"], e["module"], e["summary"], decode(e["attrs"])) for e in stored["entries"]]
        except (OSError, ValueError, KeyError, TypeError, ImportError, AttributeError):
            return None
        return {entry.name: entry for entry in listed}

    def write(self, entries: list[Listed]) -> None:
        """Store `entries`; silently nothing where a value has no exact JSON form or the folder is not writable.
        Written whole, then renamed: a listing running beside this one reads the old file or the new one."""
        try:
            text = json.dumps(
                {
                    "key": self.key,
                    "entries": [
                        {"name": e.name, "module": e.module, "summary": e.summary, "attrs": encode(e.attrs)}
                        for e in entries
                    ],
                }
            )
        except Uncacheable:
            return
        folder = os.path.dirname(self.path)
        try:
            os.makedirs(folder, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=folder, suffix=".tmp")
            try:
                with os.fdopen(handle, "w", encoding="utf-8") as file:
                    file.write(text)
                os.replace(temporary, self.path)
            except OSError:
                os.unlink(temporary)
                raise
        except OSError:
            return
