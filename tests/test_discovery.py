"""Tasks are discovered like methods: a new file in the package a registry names with "package.*" registers itself,
with no other edit (no list of modules to extend)."""

import importlib
import sys
import textwrap

import pytest

import pretexts
import pretexts.engine.methods
import pretexts.tasks
from pretexts import registry
from pretexts.engine.methods import METHODS
from pretexts.registry import Registry

TASK_FILE = """
    from pretexts.base import Corrupted, Pretext
    from {registry} import {name}

    @{name}.register("{task}")
    class Flip(Pretext):
        \"\"\"Flip the image left to right.\"\"\"

        def apply(self, images, params):
            return Corrupted(state=images.flip(-1), target=images)
    """

METHOD_FILE = """
    from pretexts.engine.methods.base import Method
    from {registry} import {name}

    @{name}.register("{method}")
    class Nothing(Method):
        summary = "learns nothing"

        build_model = loss = held_out_error = figure = lambda self, *args: None
    """


def write(folder, filename, text, **fields):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / filename).write_text(textwrap.dedent(text.format(**fields)))


@pytest.fixture
def temporary_package(tmp_path):
    """An importable package `discovered_pkg` with empty `tasks` and `methods` subpackages and its own registries."""
    root = tmp_path / "discovered_pkg"
    write(
        root,
        "__init__.py",
        """
        from pretexts.registry import Registry
        TASKS = Registry("pretext task", "discovered_pkg.tasks", ("discovered_pkg.tasks.*",))
        METHODS = Registry("method", "discovered_pkg.methods", ("discovered_pkg.methods.*",))
        """,
    )
    write(root / "tasks", "__init__.py", "")
    write(root / "methods", "__init__.py", "")
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    try:
        yield root
    finally:
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m.split(".")[0] == "discovered_pkg"]:
            del sys.modules[module]


def test_a_new_task_and_method_file_register_through_a_fresh_registry(temporary_package):
    import discovered_pkg

    tasks, methods = discovered_pkg.TASKS, discovered_pkg.METHODS
    assert isinstance(tasks, Registry) and isinstance(methods, Registry)
    write(temporary_package / "tasks", "flip.py", TASK_FILE, registry="discovered_pkg", name="TASKS", task="flip")
    write(
        temporary_package / "methods",
        "nothing.py",
        METHOD_FILE,
        registry="discovered_pkg",
        name="METHODS",
        method="nothing",
    )
    importlib.invalidate_caches()
    assert list(tasks.table) == [] and list(methods.table) == []  # nothing is imported before first use
    assert tasks.get("flip").__module__ == "discovered_pkg.tasks.flip"
    assert methods.get("nothing").__module__ == "discovered_pkg.methods.nothing"
    # one more file later: a forced reload finds it too
    write(temporary_package / "tasks", "mirror.py", TASK_FILE, registry="discovered_pkg", name="TASKS", task="mirror")
    importlib.invalidate_caches()
    tasks.load(force=True)
    assert set(tasks.table) == {"flip", "mirror"}


def test_the_real_registries_list_their_packages_with_a_star():
    assert "pretexts.tasks.*" in registry.TASKS.builtins
    assert "pretexts.engine.methods.*" in METHODS.builtins


def test_a_file_dropped_among_the_builtin_tasks_and_methods_is_registered(tmp_path, monkeypatch):
    """The real `TASKS` and `METHODS`: a module found in `pretexts/tasks/` (or `engine/methods/`) registers itself."""
    write(
        tmp_path / "tasks",
        "extra_flip.py",
        TASK_FILE,
        registry="pretexts.registry",
        name="TASKS",
        task="test-extra-flip",
    )
    write(
        tmp_path / "methods",
        "extra_nothing.py",
        METHOD_FILE,
        registry="pretexts.engine.methods",
        name="METHODS",
        method="test-extra-nothing",
    )
    monkeypatch.setattr(pretexts.tasks, "__path__", [*pretexts.tasks.__path__, str(tmp_path / "tasks")])
    monkeypatch.setattr(
        pretexts.engine.methods, "__path__", [*pretexts.engine.methods.__path__, str(tmp_path / "methods")]
    )
    importlib.invalidate_caches()
    try:
        registry.TASKS.load(force=True)
        METHODS.load(force=True)
        assert "test-extra-flip" in pretexts.list_pretexts()
        assert pretexts.create_pretext("test-extra-flip").__module__ == "pretexts.tasks.extra_flip"
        assert METHODS.get("test-extra-nothing").__module__ == "pretexts.engine.methods.extra_nothing"
        assert list(registry.TASKS.table)[:2] == ["gridded-mask", "random-mask"]  # the listed order still first
    finally:
        registry.TASKS.table.pop("test-extra-flip", None)
        METHODS.table.pop("test-extra-nothing", None)
        sys.modules.pop("pretexts.tasks.extra_flip", None)
        sys.modules.pop("pretexts.engine.methods.extra_nothing", None)
