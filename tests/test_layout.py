"""The engine's rooms keep their direction: only the CLI and the package's API import the training loop, and the
loop names no method."""
import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_room_imports_the_training_loop():
    offenders = [str(path.relative_to(ENGINE)) for room in ("evaluation", "methods", "data")
                 for path in (ENGINE / room).rglob("*.py") if "pretexts.engine.training.loop" in imported_modules(path)]
    assert offenders == []


def test_the_loop_imports_no_particular_method():
    methods = {m for m in imported_modules(ENGINE / "training" / "loop.py") if m.startswith("pretexts.engine.methods")}
    assert methods == {"pretexts.engine.methods.base"}


REPO = ENGINE.parent


def package_folders() -> set[str]:
    """Every folder of the three trees that holds an __init__.py, by its installed name."""
    installed = {"pretexts": "pretexts", "engine": "pretexts.engine", "backbones": "pretexts.backbones"}
    found = set()
    for top, name in installed.items():
        for init in (REPO / top).rglob("__init__.py"):
            parts = init.parent.relative_to(REPO / top).parts
            found.add(".".join((name, *parts)))
    return found


def test_every_package_folder_is_installed_under_the_pretexts_namespace():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert set(project["tool"]["setuptools"]["packages"]) == package_folders()


def test_no_module_imports_the_repository_folders_by_their_bare_names():
    """`import engine` would load a second copy beside pretexts.engine (or a user's engine.py)."""
    offenders = [f"{path.relative_to(REPO)}: {name}" for top in ("pretexts", "engine", "backbones", "tests",
                                                                  "benchmarks", "examples")
                 for path in (REPO / top).rglob("*.py")
                 for name in imported_modules(path) if name.split(".")[0] in ("engine", "backbones")]
    assert offenders == []


def test_a_users_engine_and_backbones_do_not_shadow_the_library(tmp_path):
    """Run from a folder holding an engine.py and a backbones/ package (DETR-family repositories have both),
    with that folder first on the path as `python -m` puts it, `pretexts train` still trains."""
    import subprocess
    import sys

    (tmp_path / "engine.py").write_text("raise ImportError('the user engine.py was imported')\n")
    (tmp_path / "backbones").mkdir()
    (tmp_path / "backbones" / "__init__.py").write_text("raise ImportError('the user backbones/ was imported')\n")
    result = subprocess.run(
        [sys.executable, "-m", "pretexts", "train", "--backbone", "test_convnext", "--data", "synthetic",
         "--batch-size", "8", "--epochs", "1", "--max-steps-per-epoch", "1", "--eval-images", "8",
         "--figure-images", "2", "--monitor-every", "0", "--workers", "0", "--out", str(tmp_path / "run")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "checkpoint.pt").is_file()
