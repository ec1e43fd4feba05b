"""What a registry refuses as a class registers, and what its errors and listings then say: a built-in's name taken in
the user's own process, a method or task missing a required hook, a broken plugin's advice and location, the
plugin origin of what a failing entry point registered, summaries that wrap, and the default title of a method that
ignores the task."""

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from plugin_installs import plugin_installer

import pretexts
from pretexts import registry
from pretexts.cli import main
from pretexts.engine import Method
from pretexts.errors import ParameterError, UnknownNameError

FRESH_PROCESS = """
    import pretexts
    from pretexts import Corrupted, Pretext, engine
    from pretexts.errors import DuplicateNameError


    class Flip(Pretext):
        '''Flip.'''

        def apply(self, images, params):
            return Corrupted(state=images.flip(-1), target=images)


    def refused(register, entry):
        try:
            register(entry)
        except DuplicateNameError as err:
            return str(err)
        return "accepted"


    print(refused(pretexts.register("colorization"), Flip))
    print(type(pretexts.create_pretext("random-mask")).__name__, "colorization" in pretexts.list_pretexts())
    print(refused(engine.register_method("ae"), type("Mine", (engine.Method,), {})))
    print(engine.METHODS.get("energy").__name__)
    from pretexts.engine.evaluation.probe import register_probe
    from pretexts.registry import PROBES

    print(refused(register_probe("knn", {}), lambda train, val, num_classes, cfg: ({}, "")))
    print(PROBES.get("linear").__name__)
"""


def test_a_builtin_name_taken_in_a_fresh_process_is_refused_at_once_and_the_registries_stay_usable():
    """Before any built-in is loaded: the clash is refused at the decorator, naming the built-in, and nothing after
    it fails (it used to be accepted, then every task or method lookup raised)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(FRESH_PROCESS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    task, tasks, method, energy, probe, linear = done.stdout.splitlines()
    assert task.startswith("pretext task 'colorization' is registered twice: the built-in (")
    assert "pretexts/tasks/colorization.py:" in task and "such as 'my-colorization'" in task
    assert tasks == "RandomMask True"
    assert method.startswith("method 'ae' is registered twice: the built-in (") and "autoencoder.py:" in method
    assert "such as 'my-ae'" in method and energy == "EnergyMethod"
    assert probe.startswith("probe 'knn' is registered twice: the built-in (") and "such as 'my-knn'" in probe
    assert linear == "linear_probe"


def test_a_builtin_module_that_fails_partway_does_not_leave_its_registry_failing(tmp_path):
    """A built-in module that registers, then raises: the next load imports it afresh, not as a clash with itself."""
    root = tmp_path / "halfway_pkg"
    (root / "tasks").mkdir(parents=True)
    (root / "__init__.py").write_text(
        'from pretexts.registry import Registry\nTASKS = Registry("pretext task", "halfway_pkg.tasks", '
        '("halfway_pkg.tasks.*",), base="pretexts.base:Pretext")\n'
    )
    (root / "tasks" / "__init__.py").write_text("")
    flag = tmp_path / "fail-once"
    flag.write_text("")
    (root / "tasks" / "flip.py").write_text(
        textwrap.dedent(
            f"""
            import os
            from pretexts.base import Corrupted, Pretext
            from halfway_pkg import TASKS

            @TASKS.register("flip")
            class Flip(Pretext):
                def apply(self, images, params):
                    return Corrupted(state=images.flip(-1), target=images)

            if os.path.exists({str(flag)!r}):
                os.remove({str(flag)!r})
                raise RuntimeError("failed once")
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        from halfway_pkg import TASKS

        with pytest.raises(RuntimeError, match="failed once"):
            TASKS.load()
        TASKS.load()
        assert list(TASKS.table) == ["flip"] and TASKS.get("flip").__module__ == "halfway_pkg.tasks.flip"
    finally:
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m.split(".")[0] == "halfway_pkg"]:
            del sys.modules[module]


def test_a_method_or_task_missing_a_required_hook_is_refused_as_it_registers():
    from pretexts.engine import register_method

    class NoLoss(Method):
        """Builds a model, and nothing else."""

        def build_model(self):
            return None

    with pytest.raises(ParameterError, match=r"method 'no-loss': NoLoss does not define `loss`, `held_out_error`, "):
        register_method("no-loss")(NoLoss)

    class NoApply(pretexts.Pretext):
        """Neither apply nor corrupt."""

    with pytest.raises(ParameterError, match=r"'no-apply': NoApply does not define `apply` or `corrupt`"):
        pretexts.register("no-apply")(NoApply)
    assert "no-apply" not in pretexts.list_pretexts() and "no-loss" not in registry.METHODS.table


@pytest.fixture
def method_plugin(tmp_path):
    with plugin_installer(tmp_path, registry.METHODS, "pretexts.methods") as install:
        yield install


def test_a_method_plugin_without_loss_is_broken_at_its_decorator_and_a_run_writes_nothing(method_plugin, tmp_path):
    method_plugin(
        "half_method",
        """
        from pretexts.engine import Method, register_method

        @register_method("half")
        class Half(Method):
            '''Builds a model and nothing else.'''

            def build_model(self):
                return None
        """,
        "half = half_method:Half",
    )
    registry.METHODS.load(force=True)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", "--method", "half", "--out", str(out)])
    assert result.exit_code == 2 and not out.exists(), result.output
    assert "half_method.py:4: ParameterError: method 'half': Half does not define `loss`" in result.output


@pytest.mark.parametrize(("kind", "flag"), [("METHODS", "--methods"), ("PROBES", "--probes")])
def test_a_broken_method_or_probe_plugin_points_to_its_own_listing(kind, flag, tmp_path):
    table = getattr(registry, kind)
    with plugin_installer(tmp_path, table, table.group) as install:
        install("raises_entry", "raise RuntimeError('boom')\n", "raiser = raises_entry:Raiser")
        table.load(force=True)
        with pytest.raises(UnknownNameError, match=rf"`pretexts --debug list {flag}` shows its traceback"):
            table.get("raiser")
        listed = CliRunner().invoke(main, ["--debug", "list", flag])
    assert "raiser             BROKEN plugin" in listed.output and "RuntimeError: boom" in listed.output


TWO_ENTRIES = """
    import pretexts


    @pretexts.register("test-two-entries")
    class Swap(pretexts.Pretext):
        \"\"\"Swap the red and blue channels of each image, a corruption whose undoing needs the colours of
        the scene.

        Not part of the summary.
        \"\"\"

        def apply(self, images, params):
            return pretexts.Corrupted(state=images.flip(1), target=images)
"""


def test_what_a_failing_entry_point_registered_keeps_its_plugin_and_the_failure_its_file(tmp_path):
    """`mod:DoesNotExist` first imports the module, which registers a task, then fails on the attribute: the task is
    the plugin's, and the failure is located in the plugin's file, not in importlib."""
    with plugin_installer(tmp_path, registry.TASKS, "pretexts.tasks") as install:
        install("two_entries", TWO_ENTRIES, "missing = two_entries:DoesNotExist\nswap = two_entries:Swap")
        registry.TASKS.load(force=True)
        listed = CliRunner().invoke(main, ["list"]).output
    summary = "Swap the red and blue channels of each image, a corruption whose undoing needs the colours of the scene."
    assert f"test-two-entries   {summary} [plugin two_entries 1.0]" in listed
    broken = f"missing            BROKEN plugin: two_entries 1.0 (two_entries:DoesNotExist) failed at {tmp_path}"
    assert f"{broken}/two_entries.py: AttributeError:" in listed
    assert "swap " not in listed  # the second entry point found its task registered


def test_a_task_summary_is_its_docstrings_first_paragraph_on_one_line():
    class Wraps(pretexts.Pretext):
        """Blank a random band of rows in each image, so that the restoration fills it from the rows
        around it.

        More detail.
        """

    assert Wraps.summary() == (
        "Blank a random band of rows in each image, so that the restoration fills it from the rows around it."
    )


def test_the_default_title_of_a_method_that_ignores_the_task_names_no_task():
    class OwnCorruption(Method):
        uses_task = False

    class WithTask(Method):
        pass

    cfg = SimpleNamespace(method="turns", task="random-mask", backbone="convnext_atto", method_args={})
    assert OwnCorruption(cfg, None, "cpu").default_title() == "turns on convnext_atto"
    assert WithTask(cfg, None, "cpu").default_title() == "turns: random-mask on convnext_atto"
