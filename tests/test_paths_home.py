"""A `~` in any path a user gives is their home folder, as `--data` always read it: `--out` (on the command line,
where `--out=~/x` reaches the command unexpanded, and in a config file, where no shell expands it), `--checkpoint`,
`--config` itself. Before, `--out ~/x` wrote a literal ./~/x folder while saying "wrote ~/x/"."""

import json

import pytest
from cli_runs import ONE_STEP, one_torch_thread, run_cli  # noqa: F401 (autouse)
from pretrained_checkpoints import write_checkpoint

from pretexts.cli.config_file import build_config
from pretexts.engine.evaluation.probe_config import ProbeConfig


@pytest.fixture
def home(tmp_path, monkeypatch):
    """HOME in a temporary folder, and the command run from another one (where a literal `~` folder would go)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return home


def succeeds(args) -> str:
    result, _ = run_cli(args)
    assert result.exit_code == 0, result.output
    return result.output


def test_out_in_a_config_file_and_the_config_path_itself(home):
    (home / "run.yaml").write_text("out: ~/yaml_out\n")
    output = succeeds([*ONE_STEP, "--config=~/run.yaml"])
    assert (home / "yaml_out" / "checkpoint.pt").is_file()
    assert not (home.parent / "cwd" / "~").exists()
    assert f"wrote {home}/yaml_out/: " in output
    assert json.loads((home / "yaml_out" / "config.json").read_text())["out"] == str(home / "yaml_out")


def test_out_on_the_command_line(home):
    output = succeeds([*ONE_STEP, "--out=~/cli_out"])
    assert (home / "cli_out" / "checkpoint.pt").is_file() and f"wrote {home}/cli_out/: " in output
    assert not (home.parent / "cwd" / "~").exists()


def test_set_and_every_path_field_of_a_config(home):
    """--set and a config's path fields (checkpoint, data, out); other text, and `auto`, as given."""
    cfg = build_config(ProbeConfig, {"checkpoint": "~/run/checkpoint.pt", "data": "sample"}, None, ("out=~/p",))
    assert (cfg.checkpoint, cfg.data, cfg.out) == (f"{home}/run/checkpoint.pt", "sample", f"{home}/p")


def test_checkpoint_and_out_of_the_commands_that_read_a_checkpoint(home):
    write_checkpoint(home / "run" / "checkpoint.pt")
    succeeds(["export", "--checkpoint", "~/run/checkpoint.pt", "--out", "~/exported"])
    assert (home / "exported" / "model.safetensors").is_file()
    succeeds(["restore", "--checkpoint", "~/run/checkpoint.pt", "--images", "2", "--out", "~/r.png"])
    assert (home / "r.png").is_file() and (home / "r.json").is_file()
    succeeds(["probe", "--checkpoint", "~/run/checkpoint.pt", "--probe", "knn", "--workers", "0", "--out", "~/probe"])
    assert (home / "probe" / "results.json").is_file()
    assert not (home.parent / "cwd" / "~").exists()
