"""The package keeps its direction: each layer imports only from itself and the layers below it, the training loop
names no method, and the three repository folders install under one namespace."""

import ast
import re
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"
REPO = ENGINE.parent
INSTALLED = {"pretexts": "pretexts", "engine": "pretexts.engine", "backbones": "pretexts.backbones"}

# lowest first; a module belongs to the longest prefix that names it (ARCHITECTURE.md, "Layers")
LAYERS = [
    ("pretexts",),  # the tasks: pure corruptions, errors, registries
    ("pretexts.backbones",),  # timm by name
    ("pretexts.engine.modules", "pretexts.engine.measures"),  # shared nn blocks, decoders; feature measures
    ("pretexts.engine.data",),
    ("pretexts.engine.methods",),
    ("pretexts.engine.training",),
    ("pretexts.engine.evaluation",),
    ("pretexts.engine.compare",),  # pretrains, probes and ranks: above both
    ("pretexts.engine", "pretexts.cli", "pretexts.__main__"),  # the Python API and the CLI
]


def module_name(path: Path) -> str:
    """The installed name of a library file (a test's or a script's: its path, dotted)."""
    top = path.relative_to(REPO).parts[0]
    if top not in INSTALLED:
        return ".".join(path.relative_to(REPO).with_suffix("").parts)
    parts = path.relative_to(REPO / top).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join((INSTALLED[top], *parts))


def imported_modules(path: Path) -> set[str]:
    """Absolute names of what a file imports, relative imports resolved against its installed name."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
            if node.module is None:  # `from . import x`: x is a module of the package
                names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def layer(module: str) -> int | None:
    best, found = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), index
    return found


def library_files():
    return [path for top in INSTALLED for path in (REPO / top).rglob("*.py")]


def test_no_import_runs_back_up_the_layers():
    upward = []
    for path in library_files():
        mine = layer(module_name(path))
        for name in imported_modules(path):
            theirs = layer(name)
            if theirs is not None and theirs > mine:
                upward.append(f"{path.relative_to(REPO)} imports {name}")
    assert upward == []


def test_the_training_room_names_no_particular_method():
    generic = {"pretexts.engine.methods", "pretexts.engine.methods.base"}
    particular = [
        f"{path.relative_to(ENGINE)}: {name}"
        for path in (ENGINE / "training").rglob("*.py")
        for name in imported_modules(path)
        if name.startswith("pretexts.engine.methods") and name not in generic
    ]
    assert particular == []


def test_no_room_imports_the_training_loop():
    offenders = [
        str(path.relative_to(ENGINE))
        for room in ("evaluation", "methods", "data")
        for path in (ENGINE / room).rglob("*.py")
        if "pretexts.engine.training.loop" in imported_modules(path)
    ]
    assert offenders == []


def package_folders() -> set[str]:
    """Every folder of the three trees that holds an __init__.py, by its installed name."""
    found = set()
    for top, name in INSTALLED.items():
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
    offenders = [
        f"{path.relative_to(REPO)}: {name}"
        for top in ("pretexts", "engine", "backbones", "tests", "benchmarks", "studies", "examples")
        for path in (REPO / top).rglob("*.py")
        for name in imported_modules(path)
        if name.split(".")[0] in ("engine", "backbones")
    ]
    assert offenders == []


def test_a_users_engine_and_backbones_do_not_shadow_the_library(tmp_path):
    """Run from a folder holding an engine.py and a backbones/ package (DETR-family repositories have both), and a
    yaml.py, with that folder first on the path as `python -m` puts it, `pretexts train` still trains and imports
    none of them."""
    import subprocess
    import sys

    (tmp_path / "engine.py").write_text("raise ImportError('the user engine.py was imported')\n")
    (tmp_path / "yaml.py").write_text("open('IMPORTED', 'w').close()\n")
    (tmp_path / "backbones").mkdir()
    (tmp_path / "backbones" / "__init__.py").write_text("raise ImportError('the user backbones/ was imported')\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pretexts",
            "train",
            "--backbone",
            "test_convnext",
            "--data",
            "synthetic",
            "--batch-size",
            "8",
            "--epochs",
            "1",
            "--max-steps-per-epoch",
            "1",
            "--eval-images",
            "8",
            "--figure-images",
            "2",
            "--monitor-every",
            "0",
            "--workers",
            "0",
            "--out",
            str(tmp_path / "run"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "run" / "checkpoint.pt").is_file() and not (tmp_path / "IMPORTED").exists()


def test_architecture_names_only_files_that_exist():
    import re

    text = (REPO / "ARCHITECTURE.md").read_text()
    named = {m.group(0) for m in re.finditer(r"[\w.-]+(?:/[\w.-]+)+\.(?:py|md|toml)", text)}
    missing = sorted(path for path in named if not (REPO / path).exists())
    assert named and missing == []


def test_the_package_uses_no_study():
    """studies/ holds the research behind the defaults: the package neither imports a study nor points into one."""
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for top in INSTALLED
        for path in (REPO / top).rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if "studies/" in line or re.search(r"^\s*(from|import)\s+(representation|arms|length)\b", line)
    ]
    assert offenders == []


def test_the_package_says_what_it_does_not_when_it_was_found():
    """No issue numbers or dates in the package's code, comments, docstrings or help: what was measured, when and
    in which study belongs in docs/results (a comment may point there)."""
    history = re.compile(r"\bissue\s+#?\d+|\b20\d\d-[01]\d-[0-3]\d\b", re.IGNORECASE)
    offenders = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for top in INSTALLED
        for path in (REPO / top).rglob("*.py")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if history.search(line)
    ]
    assert offenders == []
