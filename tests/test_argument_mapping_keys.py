"""A mapping of named arguments (task_args, method_args) whose key is not a name, as YAML allows (`{1: 2}`,
`{null: 2}`), is refused in one line naming the field and the key, from a config file and from Python."""

import pytest
from cli_runs import TRAIN, fails_cleanly, one_torch_thread  # noqa: F401 (autouse)

from pretexts import PretrainConfig
from pretexts.errors import ParameterError


@pytest.mark.parametrize("written, key", [("{1: 2}", "1"), ("{null: 2}", "None"), ("{mask_ratio: 0.6, 7: 1}", "7")])
def test_a_config_files_task_args_key_that_is_not_a_name_is_one_line(tmp_path, written, key):
    config = tmp_path / "c.yaml"
    config.write_text(f"task_args: {written}\nepochs: 1\nmax_steps_per_epoch: 1\n")
    fails_cleanly(
        [*TRAIN, "--config", config, "--out", tmp_path / "run"],
        f"config file '{config}'",
        f"task_args keys must be parameter names, got {key}",
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["task_args", "method_args"])
def test_the_python_api_names_the_field_and_the_key(name):
    with pytest.raises(ParameterError, match=f"{name} keys must be parameter names, got 1;"):
        PretrainConfig(**{name: {1: 2}})
