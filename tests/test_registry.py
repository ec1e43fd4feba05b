"""The task registry: names, wildcards, None kwargs, duplicates, suggestions and entry-point plugins."""

import subprocess
import sys
import textwrap

import pytest

import pretexts
from pretexts import registry
from pretexts.errors import DuplicateNameError, ParameterError, UnknownNameError


@pytest.fixture
def clean_registry():
    """Restore the registry (and plugin state) after a test that adds to it."""
    registry.list_pretexts()  # the built-ins load on first use: snapshot them too
    tasks = registry.TASKS
    tables = [tasks.table, tasks.broken, tasks.tracebacks, tasks.shadowed, tasks.plugin_of]
    saved, loaded = [dict(table) for table in tables], (registry.TASKS.loaded, registry.TASKS.plugins_loaded)
    yield
    for table, before in zip(tables, saved):
        table.clear(), table.update(before)
    registry.TASKS.loaded, registry.TASKS.plugins_loaded = loaded


def test_import_pretexts_loads_no_torch_until_a_task_is_used():
    """`pretexts --help` stays instant: the package and its CLI import neither torch nor timm."""
    code = (
        "import sys, pretexts, pretexts.cli; assert not {'torch', 'timm', 'kornia'} & set(sys.modules), "
        "sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'timm', 'kornia'))[:3]; "
        "assert 'colorization' in pretexts.list_pretexts() and 'torch' in sys.modules; "
        "assert pretexts.Pretext.__module__ == 'pretexts.base'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_list_is_sorted_and_filters_by_wildcard():
    names = pretexts.list_pretexts()
    assert "colorization" in names and names == sorted(names)
    assert pretexts.list_pretexts("color*") == ["colorization"]
    assert pretexts.list_pretexts("no-such-*") == []


def test_unknown_name_suggests_close_names():
    with pytest.raises(UnknownNameError, match="Did you mean: colorization"):
        pretexts.create_pretext("colorisation")


def test_a_name_that_is_no_command_line_word_or_a_class_of_the_wrong_kind_is_refused_as_it_registers(clean_registry):
    for name in (3, "Bad Name!", ""):
        with pytest.raises(ParameterError, match="name is letters, digits"):
            pretexts.register(name)

    class Plain:
        """Neither a task nor a method."""

    with pytest.raises(ParameterError, match="'plainclass': .* is not a Pretext subclass"):
        pretexts.register("plainclass")(Plain)
    from pretexts.engine import register_method

    with pytest.raises(ParameterError, match="method 'plain': .* is not a Method subclass"):
        register_method("plain")(Plain)
    assert "plainclass" not in pretexts.list_pretexts()


def test_duplicate_name_names_both_definitions(clean_registry):
    with pytest.raises(DuplicateNameError) as err:

        @pretexts.register("colorization")
        class Other(pretexts.Pretext):
            pass

    assert "colorization.py" in str(err.value) and "test_registry.py" in str(err.value)


def test_none_kwargs_are_dropped_so_task_defaults_win(clean_registry):
    @pretexts.register("test-scaled")
    class Scaled(pretexts.Pretext):
        params = {"scale": pretexts.Param(16, int, low=2, high=64)}

        def apply(self, images, params):
            return pretexts.Corrupted(state=images, target=images)

    assert pretexts.create_pretext("test-scaled", scale=None).scale == 16
    assert pretexts.create_pretext("test-scaled", scale="8").scale == 8
    with pytest.raises(ParameterError, match=r"allowed range is \[2, 64\]"):
        pretexts.create_pretext("test-scaled", scale=100)
    with pytest.raises(ParameterError, match="valid parameters: scale"):
        pretexts.create_pretext("test-scaled", scael=4)


def _install_distribution(tmp_path, name: str, module_source: str, entry: str):
    """Write a module and a dist-info with an entry_points.txt, as pip would, and put it on sys.path."""
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(module_source))
    info = tmp_path / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[pretexts.tasks]\n{entry}\n")
    sys.path.insert(0, str(tmp_path))


def test_entry_point_plugin_is_discovered(tmp_path, clean_registry, monkeypatch):
    _install_distribution(
        tmp_path,
        "plugin_invert",
        """
        import pretexts

        @pretexts.register("invert")
        class Invert(pretexts.Pretext):
            '''Inverted colours, original target.'''
            def corrupt(self, images, generator=None):
                return pretexts.Corrupted(state=1 - images, target=images)
        """,
        "invert = plugin_invert:Invert",
    )
    try:
        registry.load_plugins(force=True)
        assert "invert" in pretexts.list_pretexts()
        assert "invert" not in pretexts.broken_plugins()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("plugin_invert", None)


def test_broken_plugin_is_reported_and_breaks_nothing(tmp_path, clean_registry):
    _install_distribution(
        tmp_path, "plugin_broken", "raise ImportError('missing dependency foo')\n", "broken = plugin_broken:Task"
    )
    try:
        registry.load_plugins(force=True)
        assert "missing dependency foo" in pretexts.broken_plugins()["broken"]
        assert "colorization" in pretexts.list_pretexts()
        with pytest.raises(UnknownNameError, match="comes from a plugin that failed to load"):
            pretexts.create_pretext("broken")
    finally:
        sys.path.remove(str(tmp_path))


@pytest.fixture
def plugin(tmp_path, clean_registry):
    """Installs one plugin distribution (module, dist-info, entry point); removed after the test."""
    names = []

    def install(name: str, source: str, entry: str) -> None:
        _install_distribution(tmp_path, name, source, entry)
        names.append(name)

    yield install
    sys.path.remove(str(tmp_path))
    for name in names:
        sys.modules.pop(name, None)


def test_a_broken_plugin_task_is_named_with_where_it_failed_and_no_unrelated_suggestions(plugin):
    plugin("plugin_raises", "import os\n\nraise RuntimeError('bad config')\n", "raiser = plugin_raises:Task")
    registry.load_plugins(force=True)
    with pytest.raises(UnknownNameError) as err:
        pretexts.create_pretext("raiser")
    message = str(err.value)
    assert "failed to load" in message and "plugin_raises.py:3" in message and "Did you mean" not in message
    assert "plugin_raises 1.0" in message
    assert 'plugin_raises.py", line 3' in registry.broken_traceback("raiser")  # what --debug shows


def test_a_plugin_under_another_entry_point_name_works_and_shows_its_package(plugin):
    plugin(
        "plugin_alias",
        """
        import pretexts
        @pretexts.register("test-flip")
        class Flip(pretexts.Pretext):
            def corrupt(self, images, generator=None):
                return pretexts.Corrupted(images.flip(-1), images)
        """,
        "flipper = plugin_alias:Flip",
    )
    registry.load_plugins(force=True)
    assert "flipper" not in pretexts.broken_plugins() and "test-flip" in pretexts.list_pretexts()
    assert registry.plugin_of("test-flip") == "plugin_alias 1.0" and registry.plugin_of("colorization") is None


def test_a_plugin_reusing_a_builtin_name_is_ignored_once_and_the_builtin_wins(plugin):
    plugin(
        "plugin_clash",
        """
        import pretexts
        @pretexts.register("colorization")
        class MyColour(pretexts.Pretext):
            pass
        """,
        "colorization = plugin_clash:MyColour",
    )
    with pytest.warns(UserWarning, match="the built-in wins"):
        registry.load_plugins(force=True)
    assert pretexts.get_pretext_class("colorization").__module__ == "pretexts.tasks.colorization"
    assert pretexts.list_pretexts().count("colorization") == 1
    assert "colorization" not in pretexts.broken_plugins()
    assert "plugin_clash 1.0" in registry.shadowed_plugins()["colorization"]


def test_a_task_whose_apply_returns_no_corrupted_sample_is_named(clean_registry):
    import torch

    @pretexts.register("returns-images")
    class ReturnsImages(pretexts.Pretext):
        """Returns the images themselves, not a Corrupted."""

        def apply(self, images, params):
            return images

    with pytest.raises(ParameterError, match="returns-images: apply must return a Corrupted.*got Tensor"):
        pretexts.create_pretext("returns-images")(torch.rand(2, 3, 8, 8))
