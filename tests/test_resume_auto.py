"""A --resume is checked against its checkpoint as its config is built: a change is refused before the start line,
and `auto` asked again is what the checkpoint resolved it to, not a change."""

from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from pretrained_checkpoints import finetune_argv


def test_a_resume_that_asks_auto_again_continues(tmp_path):
    """`auto` (asked again, or from the run's config.json) is what the checkpoint resolved it to, not a change."""
    out, ft = tmp_path / "run", tmp_path / "ft"
    once = [*TRAIN, "--max-steps-per-epoch", "1", "--workers", "0", "--schedule", "auto", "--out", out]
    assert run_cli([*once, "--epochs", "1", "--monitor-every", "0"])[0].exit_code == 0
    result, error = run_cli([*once, "--resume", "--epochs", "2"])
    assert result.exit_code == 0, error or result.output
    result, error = run_cli(["train", "--config", out / "config.json", "--resume", "--epochs", "3"])
    assert result.exit_code == 0, error or result.output
    assert run_cli(finetune_argv(out / "checkpoint.pt", ft))[0].exit_code == 0  # recipe auto resolved to small
    result, error = run_cli(["finetune", "--config", ft / "config.json", "--resume", "--epochs", "2"])
    assert result.exit_code == 0, error or result.output
