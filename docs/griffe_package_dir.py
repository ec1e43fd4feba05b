"""A griffe extension for the API page: pyproject.toml's package-dir installs engine/ as `pretexts.engine` and
backbones/ as `pretexts.backbones`, which griffe's walk of the pretexts/ folder cannot see. It loads them as
subpackages of `pretexts`, and adds the lazy names a user imports (`pretexts.engine.API`, `pretexts._LAZY`: loaded
on first use through a module `__getattr__`) as aliases, so `::: pretexts.engine.pretrain` documents what
`from pretexts.engine import pretrain` gives."""

import ast
from pathlib import Path

import griffe

MAPPED = ("engine", "backbones")  # subpackages of pretexts whose folders lie at the repository root


def lazy_names(module: griffe.Module, table: str) -> dict[str, str]:
    """The module's dict `table` (name -> module it loads from, relative to `module`)."""
    return ast.literal_eval(str(module.members[table].value)) if table in module.members else {}


class PackageDir(griffe.Extension):
    """Grafts the mapped folders onto `pretexts` once griffe has read `pretexts/__init__.py`."""

    def on_module_members(self, *, mod: griffe.Module, agent, **kwargs) -> None:
        if mod.path != "pretexts" or mod.filepath is None:
            return
        loader = griffe.GriffeLoader(
            search_paths=[Path(mod.filepath).parent.parent],
            docstring_parser=agent.docstring_parser,
            docstring_options=agent.docstring_options,
            lines_collection=agent.lines_collection,
            modules_collection=mod.modules_collection,
        )
        for name in MAPPED:
            sub = loader.load(name)
            sub.parent = mod  # its objects' paths become pretexts.engine.*, the names its own imports use
            mod.set_member(name, sub)
        engine = mod.members["engine"]
        for name, where in lazy_names(engine, "API").items():
            engine.set_member(name, griffe.Alias(name, f"pretexts.engine.{where}.{name}", parent=engine))
        for name, where in lazy_names(mod, "_LAZY").items():
            mod.set_member(name, griffe.Alias(name, f"pretexts.{where}.{name}", parent=mod))
