"""The task registry: names, wildcards, None kwargs, duplicates, suggestions and entry-point plugins."""
import sys
import textwrap

import pytest

import pretexts
from pretexts import registry
from pretexts.errors import DuplicateNameError, ParameterError, UnknownNameError


@pytest.fixture
def clean_registry():
    """Restore the registry (and plugin state) after a test that adds to it."""
    tasks, broken, loaded = dict(registry._TASKS), dict(registry._BROKEN), registry._plugins_loaded
    yield
    registry._TASKS.clear(), registry._TASKS.update(tasks)
    registry._BROKEN.clear(), registry._BROKEN.update(broken)
    registry._plugins_loaded = loaded


def test_list_is_sorted_and_filters_by_wildcard():
    names = pretexts.list_pretexts()
    assert "colorization" in names and names == sorted(names)
    assert pretexts.list_pretexts("color*") == ["colorization"]
    assert pretexts.list_pretexts("no-such-*") == []


def test_unknown_name_suggests_close_names():
    with pytest.raises(UnknownNameError, match="Did you mean: colorization"):
        pretexts.create_pretext("colorisation")


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
    _install_distribution(tmp_path, "plugin_invert", """
        import pretexts

        @pretexts.register("invert")
        class Invert(pretexts.Pretext):
            '''Inverted colours, original target.'''
            def corrupt(self, images, generator=None):
                return pretexts.Corrupted(state=1 - images, target=images)
        """, "invert = plugin_invert:Invert")
    try:
        registry.load_plugins(force=True)
        assert "invert" in pretexts.list_pretexts()
        assert "invert" not in pretexts.broken_plugins()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("plugin_invert", None)


def test_broken_plugin_is_reported_and_breaks_nothing(tmp_path, clean_registry):
    _install_distribution(tmp_path, "plugin_broken", "raise ImportError('missing dependency foo')\n",
                          "broken = plugin_broken:Task")
    try:
        registry.load_plugins(force=True)
        assert "missing dependency foo" in pretexts.broken_plugins()["broken"]
        assert "colorization" in pretexts.list_pretexts()
        with pytest.raises(UnknownNameError, match="plugin failed to load"):
            pretexts.create_pretext("broken")
    finally:
        sys.path.remove(str(tmp_path))
