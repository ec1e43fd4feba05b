"""The Examples in the public API's docstrings run as written (doctest, on the CPU), so none can rot: one test per
object, which fails where the object's docstring has no Example."""

import doctest
import importlib
import inspect

import pytest

from pretexts import registry

# the objects docs/api.md documents with an Example; a class's test runs its methods' Examples too
PUBLIC = [
    "pretexts.engine.methods.states.prepare_task",
    "pretexts.engine.evaluation.from_checkpoint.load_energy_run",
    "pretexts.registry.create_pretext",
    "pretexts.registry.register",
    "pretexts.registry.list_pretexts",
    "pretexts.registry.get_pretext_class",
    "pretexts.registry.Registry",
    "pretexts.base.Pretext",
    "pretexts.base.Corrupted",
    "pretexts.params.Param",
    "pretexts.engine.methods.base.Method",
    "pretexts.engine.methods.report.HeldOut",
    "pretexts.engine.methods.energy.model.create_energy_model",
    "pretexts.engine.methods.energy.restore.restore",
    "pretexts.engine.methods.energy.restore.restoration_loss",
    "pretexts.engine.evaluation.probe.register_probe",
]
REGISTRIES = (registry.TASKS, registry.METHODS, registry.PROBES)


def resolve(path: str):
    module, name = path.rsplit(".", 1)
    return importlib.import_module(module), getattr(importlib.import_module(module), name)


@pytest.fixture
def registries_kept():
    """The names an Example registers are gone after it (the registries loaded first, so no load is undone)."""
    saved = []
    for reg in REGISTRIES:
        reg.load()
        saved.append((reg, dict(reg.table), dict(reg.plugin_of)))
    yield
    for reg, table, plugin_of in saved:
        reg.table.clear(), reg.table.update(table)
        reg.plugin_of.clear(), reg.plugin_of.update(plugin_of)


@pytest.mark.parametrize("path", PUBLIC)
def test_the_docstring_example_runs(path, registries_kept):
    module, obj = resolve(path)
    assert ">>> " in (inspect.getdoc(obj) or ""), f"{path}'s docstring has no Example"
    # globs={}: each Example imports what it uses, as a reader copying it would
    tests = doctest.DocTestFinder().find(obj, path, module=module, globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    for test in tests:
        if test.examples:
            runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
    assert runner.tries > 0
