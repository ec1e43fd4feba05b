"""Plugin distributions installed for one test (a module, its dist-info and an entry point in a temporary folder
on sys.path), and the registry put back as it was after it."""

import sys
import textwrap
from contextlib import contextmanager


@contextmanager
def plugin_installer(folder, registry, group: str):
    """Yields `install(name, source, entry)`; on exit the modules, the path entry and the registry's tables are
    restored and the registry reloaded."""
    tables = [registry.table, registry.broken, registry.tracebacks, registry.shadowed, registry.plugin_of]
    registry.load()
    saved = [dict(table) for table in tables]
    names = []

    def install(name: str, source: str, entry: str) -> None:
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
        info = folder / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")
        names.append(name)

    sys.path.insert(0, str(folder))
    try:
        yield install
    finally:
        sys.path.remove(str(folder))
        for name in names:
            sys.modules.pop(name, None)
        for table, before in zip(tables, saved):
            table.clear(), table.update(before)
        registry.load(force=True)
