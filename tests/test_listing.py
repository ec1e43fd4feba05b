"""`pretexts list` reads the built-ins' declarations from their source: it imports no torch, and what it reads is
what the imported tasks, methods and probes declare; plugins are still imported, a shadowing one still ignored."""

import os
import subprocess
import sys
import textwrap

import pytest

from pretexts.cli.list_cmd import summary_of
from pretexts.declared import read_builtins
from pretexts.registry import METHODS, PROBES, TASKS


def run_listing(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI's `main` in a fresh interpreter; its last line says whether torch was imported."""
    code = (
        f"import sys; from pretexts.cli import main; main({args!r}, standalone_mode=False); "
        f"print('torch imported:', 'torch' in sys.modules)"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "args, shown",
    [
        (["list"], ["super-resolution", "scale=auto (16 at 224 px, 2 at 32 px)", "mixed"]),
        (
            ["list", "-v"],
            [
                "--task-arg grid=...",
                "default scaled to the image: 16 at 224 px, 2 at 32 px",
                "--preset small: count=75",
            ],
        ),
        (["list", "--methods"], ["energy", "--method-arg steps=...", "mae", "simmim"]),
        (["list", "--probes"], ["linear", "knn", "knn_k=(20, 200)"]),
    ],
)
def test_listing_imports_no_torch(args, shown):
    done = run_listing(args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "torch imported: False", done.stdout
    for text in shown:
        assert text in done.stdout


@pytest.mark.parametrize("registry", [TASKS, METHODS, PROBES], ids=lambda r: r.kind)
def test_what_is_read_is_what_the_imported_entries_declare(registry):
    registry.load()
    builtins = {name: entry for name, entry in registry.table.items() if name not in registry.plugin_of}
    read = read_builtins(registry.builtins, registry.decorator, registry.declares)
    assert [d.name for d in sorted(read, key=lambda d: registry.rank(d.module))] == list(builtins)
    for declared in read:
        real = builtins[declared.name]
        assert declared.module == real.__module__
        assert declared.summary == summary_of(real)
        for attr in registry.declares or ("params",):
            assert getattr(declared, attr) == (getattr(real, attr, None) or {}), (declared.name, attr)


def test_a_plugin_is_listed_and_one_shadowing_a_builtin_ignored_without_importing_the_builtins(tmp_path):
    (tmp_path / "plugin_flip.py").write_text(
        textwrap.dedent("""
        from pretexts.registry import TASKS

        @TASKS.register("flip-plugin")
        class Flip:
            '''Flip the image (a plugin).'''
        """)
    )
    (tmp_path / "plugin_shadow.py").write_text(
        textwrap.dedent("""
        from pretexts.registry import TASKS

        @TASKS.register("denoising")
        class Denoise:
            '''Not the built-in.'''
        """)
    )
    info = tmp_path / "plugin_shadow-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-shadow\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pretexts.tasks]\nflip = plugin_flip:Flip\nshadow = plugin_shadow\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = run_listing(["list"], env)
    assert done.returncode == 0, done.stderr
    assert "flip-plugin        Flip the image (a plugin). [plugin plugin-shadow 1.0]" in done.stdout
    assert "shadow             IGNORED plugin" in done.stdout and "'denoising' is registered twice" in done.stdout
    assert "Mix each image with Gaussian noise" in done.stdout  # the built-in's own line
    assert done.stdout.splitlines()[-1] == "torch imported: False"
    # the built-ins, imported later in the same process, register as ever; the plugin's task stays
    code = (
        "import warnings; warnings.simplefilter('ignore'); from pretexts.cli import main; "
        "main(['list'], standalone_mode=False); import pretexts; "
        "print(type(pretexts.create_pretext('denoising')).__module__, pretexts.get_pretext_class('flip-plugin'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("pretexts.tasks.denoising <class 'plugin_flip.Flip'>")


def test_a_builtin_whose_declarations_cannot_be_read_is_imported_instead(tmp_path, monkeypatch):
    (tmp_path / "thing_registry.py").write_text(
        "from pretexts.registry import Registry\n\n"
        "THINGS = Registry('thing', 'pretexts.no-such-group', ('thing_parts',), "
        "decorator='register', declares=('params',))\n"
    )
    (tmp_path / "thing_parts.py").write_text(
        textwrap.dedent("""
        from thing_registry import THINGS

        register = THINGS.register

        @register("computed")
        class Computed:
            '''Parameters made by a comprehension, which the reader does not evaluate.'''
            params = {key: key.upper() for key in "ab"}
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        from thing_registry import THINGS

        entries = THINGS.entries()
        assert list(entries) == ["computed"] and entries["computed"].params == {"a": "A", "b": "B"}
        assert "thing_parts" in sys.modules
    finally:
        sys.modules.pop("thing_registry", None), sys.modules.pop("thing_parts", None)
