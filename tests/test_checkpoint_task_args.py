"""`restore` and `energy` corrupt with the task a checkpoint trained on, as it trained: `--task-arg` without `--task`
changes only the arguments it names, and `--task` starts that task from its own defaults."""

import json

import pytest
from cli_runs import run_cli
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

TRAINED = {"tasks": "random-mask:count=3,colorization", "fill": "black"}
OPTIONS = {"restore": ["--images", "2"], "energy": ["--images", "2", "--workers", "0"]}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path, _ = write_checkpoint(tmp_path_factory.mktemp("mixed") / "ckpt.pt", task="mixed", task_args=TRAINED)
    return path


def task_args_used(command: str, checkpoint, out, *args) -> dict:
    """The task arguments `command` recorded in its .json after corrupting with `args`."""
    result, error = run_cli([command, "--checkpoint", checkpoint, *OPTIONS[command], *args, "--out", out])
    assert result.exit_code == 0, result.output + error
    recorded = json.loads(out.with_suffix(".json").read_text())
    return recorded["task"], recorded["task_args"]


@pytest.mark.parametrize("command", ["restore", "energy"])
def test_a_task_arg_without_a_task_keeps_the_trained_arguments(command, checkpoint, tmp_path):
    task, args = task_args_used(command, checkpoint, tmp_path / "fill.png", "--task-arg", "fill=gray")
    assert task == "mixed" and args == {"tasks": ["random-mask:count=3", "colorization"], "fill": "gray"}


@pytest.mark.parametrize("command", ["restore", "energy"])
def test_a_named_task_starts_from_its_own_defaults(command, checkpoint, tmp_path):
    out = tmp_path / "named.png"
    task, args = task_args_used(command, checkpoint, out, "--task", "random-mask", "--task-arg", "count=4")
    assert task == "random-mask" and args["count"] == 4 and args["fill"] == "gray"


def test_a_preset_without_a_task_keeps_the_trained_fill(tmp_path):
    path, _ = write_checkpoint(tmp_path / "ckpt.pt", task="random-mask", task_args={"fill": "black"})
    task, args = task_args_used("restore", path, tmp_path / "small.png", "--preset", "small")
    assert task == "random-mask" and args["fill"] == "black" and args["count"] == 75
