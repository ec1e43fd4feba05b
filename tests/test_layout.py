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
                 for path in (ENGINE / room).rglob("*.py") if "engine.training.loop" in imported_modules(path)]
    assert offenders == []


def test_the_loop_imports_no_particular_method():
    methods = {m for m in imported_modules(ENGINE / "training" / "loop.py") if m.startswith("engine.methods")}
    assert methods == {"engine.methods.base"}
