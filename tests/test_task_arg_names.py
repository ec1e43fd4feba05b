"""A task argument's name is checked even when it has no value: YAML reads `{scale:8}` (no space after the colon)
as the key 'scale:8' with no value, and `{sclae: }` as a misspelt key with none; both are refused in one line, as
a misspelt name with a value is, instead of running silently with the default."""

import pytest
from cli_runs import ONE_STEP, fails_cleanly, one_torch_thread  # noqa: F401 (a fixture)

from pretexts import create_pretext
from pretexts.errors import ParameterError


@pytest.mark.parametrize("value", ["{scale:8}", "{sclae: }"])
def test_a_task_argument_with_no_value_and_an_unknown_name_is_refused(tmp_path, value):
    out = tmp_path / "run"
    wrong = value.strip("{}").rstrip(": ")
    args = [*ONE_STEP, "--task", "super-resolution", "--set", f"task_args={value}", "--out", out]
    fails_cleanly(args, f"unknown parameter '{wrong}'", "valid parameters: scale", "Did you mean: scale?")
    assert not out.exists()


def test_the_same_in_a_config_file(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("task: super-resolution\ntask_args: {sclae: }\n")
    fails_cleanly([*ONE_STEP, "--config", config, "--out", tmp_path / "run"], "unknown parameter 'sclae'")


def test_create_pretext_checks_names_before_dropping_unset_values():
    with pytest.raises(ParameterError, match="unknown parameter 'sclae'"):
        create_pretext("super-resolution", sclae=None)
    task = create_pretext("random-mask", preset=None, count=None)  # unset: the task's own values
    assert task.count == create_pretext("random-mask").count and task.preset is None
