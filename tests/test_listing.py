"""`pretexts list` takes the built-ins from the listing cache (pretexts/listing_cache.py): a warm listing imports no
torch and shows what a cold one (which imports the built-ins) shows; what is cached is exactly what the imported
tasks, methods and probes declare; a changed source file or version refreshes it; a cache folder that cannot be
written only costs time; plugins are imported on every listing, a broken one listed as broken, a shadowing one
ignored."""

import os
import subprocess
import sys
import textwrap
from importlib.util import find_spec

import pytest

import pretexts
from pretexts.listing_cache import Listed, ListingCache, source_files, source_roots, summary_of
from pretexts.params import Param
from pretexts.registry import METHODS, PROBES, TASKS

LISTINGS = [["list"], ["list", "-v"], ["list", "--methods"], ["list", "--probes"]]
SEPARATOR = "-- end of listing --"


def run_listings(listings: list[list[str]], cache_home, env: dict | None = None) -> tuple[list[str], bool]:
    """The CLI's `main` on each of `listings` in one fresh interpreter: what each printed, and whether torch was
    imported."""
    code = (
        "import sys; from pretexts.cli import main\n"
        f"for args in {listings!r}:\n"
        f"    main(args, standalone_mode=False); print({SEPARATOR!r})\n"
        "print('torch imported:', 'torch' in sys.modules)"
    )
    env = {**(env or os.environ), "XDG_CACHE_HOME": str(cache_home)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    *outputs, last = done.stdout.split(SEPARATOR + "\n")
    assert last.startswith("torch imported: "), done.stdout
    return outputs, last.strip() == "torch imported: True"


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """(cache home, the four listings with an empty cache, whether they imported torch); the cache is warm after."""
    home = tmp_path_factory.mktemp("cache-home")
    return home, *run_listings(LISTINGS, home)


def test_a_warm_listing_imports_no_torch_and_shows_what_a_cold_one_showed(cold):
    home, cold_outputs, cold_torch = cold
    assert cold_torch  # the cold listings imported the built-ins
    (*warm_outputs, patterned), warm_torch = run_listings([*LISTINGS, ["list", "*-mask"]], home)
    assert not warm_torch
    assert warm_outputs == cold_outputs
    shown = [
        ["super-resolution", "scale=auto (16 at 224 px, 2 at 32 px)", "mixed"],
        ["--task-arg grid=...", "default scaled to the image: 16 at 224 px, 2 at 32 px", "--preset small: count=75"],
        ["energy", "--method-arg steps=...", "mae", "simmim"],
        ["linear", "knn", "knn_k=(20, 200)"],
    ]
    for output, texts in zip(warm_outputs, shown):
        assert all(text in output for text in texts), output
    assert patterned.splitlines()[0].startswith("gridded-mask") and "super-resolution" not in patterned


@pytest.mark.parametrize("registry", [TASKS, METHODS, PROBES], ids=lambda r: r.kind)
def test_what_is_cached_is_what_the_imported_entries_declare(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    registry.load()
    builtins = {name: entry for name, entry in registry.table.items() if registry.is_builtin(entry.__module__)}
    ListingCache(registry.group).write([Listed.of(name, entry, registry.declares) for name, entry in builtins.items()])
    cached = ListingCache(registry.group).read()
    assert cached is not None and list(cached) == list(builtins)
    for name, real in builtins.items():
        assert cached[name].module == real.__module__
        assert cached[name].summary == summary_of(real)
        for attr in registry.declares:
            # repr, not ==: 1, 1.0 and True are equal, a tuple and a list are not the same declaration
            assert repr(getattr(cached[name], attr)) == repr(getattr(real, attr, None) or {}), (name, attr)


def test_a_changed_source_file_or_version_refreshes_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    package = tmp_path / "src" / "package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    task = package / "task.py"
    task.write_text("GRID = 16\n")
    roots = [str(tmp_path / "src")]
    entries = [Listed("grid", "package.task", "A task.", {"params": {"grid": Param(16, int, 1, 64, scaled="cells")}})]

    def cached():
        return ListingCache("group", roots).read()

    assert cached() is None  # nothing written yet
    ListingCache("group", roots).write(entries)
    assert cached() == {"grid": entries[0]}
    stat = task.stat()
    os.utime(task, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # touched
    assert cached() is None
    ListingCache("group", roots).write(entries)
    touched = task.stat().st_mtime_ns
    task.write_text("GRID = 256\n")  # one byte longer, at the time it had
    os.utime(task, ns=(stat.st_atime_ns, touched))
    assert cached() is None
    ListingCache("group", roots).write(entries)
    (package / "new_task.py").write_text("")  # a new file in the package
    assert cached() is None
    ListingCache("group", roots).write(entries)
    monkeypatch.setattr(pretexts, "__version__", "99.0")
    assert cached() is None
    ListingCache("group", roots).write(entries)
    assert cached() == {"grid": entries[0]}
    with open(ListingCache("group", roots).path, "a") as file:
        file.write("}")  # a damaged file is a miss
    assert cached() is None


def test_the_cache_key_covers_the_builtin_modules_files():
    files = {path for path, _, _ in source_files(source_roots())}
    for registry in (TASKS, METHODS, PROBES):
        for module in registry.builtins:
            spec = find_spec(module.removesuffix(".*"))
            assert os.path.realpath(spec.origin) in files, module


def test_a_cache_folder_that_cannot_be_written_still_lists(cold, tmp_path):
    _, cold_outputs, _ = cold
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    outputs, torch_imported = run_listings([["list"]], not_a_folder)
    assert outputs == cold_outputs[:1] and torch_imported


def test_a_value_json_cannot_hold_exactly_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = ListingCache("group", [])
    cache.write([Listed("odd", "module", "", {"params": {"k": Param(default=object())}})])
    assert cache.read() is None and not os.path.exists(cache.path)


def write_plugins(folder, plugins: dict[str, str]) -> dict:
    """Plugin modules (entry-point name -> source) of one installed distribution `plugin-pack 1.0` on PYTHONPATH."""
    for name, source in plugins.items():
        (folder / f"plugin_{name}.py").write_text(textwrap.dedent(source))
    info = folder / "plugin_pack-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-pack\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[pretexts.tasks]\n" + "".join(f"{name} = plugin_{name}\n" for name in plugins)
    )
    return {**os.environ, "PYTHONPATH": str(folder)}


def test_plugins_are_imported_on_a_warm_listing_broken_and_shadowing_ones_said(cold, tmp_path):
    home = cold[0]
    env = write_plugins(
        tmp_path,
        {
            "flip": """
                from pretexts.registry import TASKS

                @TASKS.register("flip-plugin")
                class Flip:
                    '''Flip the image (a plugin).'''
                """,
            "shadow": """
                from pretexts.registry import TASKS

                @TASKS.register("denoising")
                class Denoise:
                    '''Not the built-in.'''
                """,
            "broken": "raise RuntimeError('this plugin is broken')\n",
        },
    )
    for _ in range(2):  # a broken plugin is never cached as good
        (output,), torch_imported = run_listings([["list"]], home, env)
        assert not torch_imported
        assert "flip-plugin        Flip the image (a plugin). [plugin plugin-pack 1.0]" in output
        assert "shadow             IGNORED plugin" in output and "'denoising' is registered twice" in output
        assert "broken             BROKEN plugin: plugin-pack 1.0 (plugin_broken) failed at" in output
        assert "Mix each image with Gaussian noise" in output  # the built-in's own line
    # the built-ins, imported later in the same process, register as ever; the plugin's task stays
    code = (
        "import warnings; warnings.simplefilter('ignore'); from pretexts.cli import main; "
        "main(['list'], standalone_mode=False); import pretexts; "
        "print(type(pretexts.create_pretext('denoising')).__module__, pretexts.get_pretext_class('flip-plugin'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, "XDG_CACHE_HOME": str(home)}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("pretexts.tasks.denoising <class 'plugin_flip.Flip'>")


def test_a_plugin_that_subclasses_a_builtin_does_not_claim_it(cold, tmp_path):
    """The plugin imports a built-in module before the registry did (a warm listing imports none): the built-in's
    classes register then, and stay built-ins."""
    env = write_plugins(
        tmp_path,
        {
            "noisier": """
                from pretexts.registry import TASKS
                from pretexts.tasks.denoising import Denoising

                @TASKS.register("noisier")
                class Noisier(Denoising):
                    '''Denoising, noisier (a plugin).'''
                """
        },
    )
    (output,), _ = run_listings([["list"]], cold[0], env)
    lines = {line.split()[0]: line for line in output.splitlines() if not line.startswith(" ")}
    assert lines["noisier"].endswith("[plugin plugin-pack 1.0]")
    assert "[plugin" not in lines["denoising"]
