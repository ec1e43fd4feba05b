"""The start line says which of the energy method's auto options the run picked and which it was given: a loss
chosen with --loss is named as given, never as auto's pick."""

from cli_runs import run_cli

# timm's 0.4M-parameter ViT: both options resolve (the loss, and the positions of a ViT); one step
RUN = ["train", "--backbone", "test_vit", "--batch-size", "8", "--epochs", "1", "--max-steps-per-epoch", "1"]
RUN += ["--eval-images", "8", "--monitor-every", "0", "--workers", "0"]


def start_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("energy: "))


def test_a_loss_given_is_named_as_given_and_the_positions_left_auto_as_picked(tmp_path):
    result, _ = run_cli([*RUN, "--loss", "smooth_l1", "--out", tmp_path / "run"])
    assert result.exit_code == 0, result.output
    line = start_line(result.output)
    assert line == (
        "energy: loss smooth_l1 (--loss; as given), positions sincos (--positions; auto picks it by backbone and task)"
    ), line
    result, _ = run_cli([*RUN, "--epochs", "2", "--resume", "--out", tmp_path / "run"])
    assert result.exit_code == 0, result.output
    line = start_line(result.output)  # the run's record holds both now
    assert line == "energy: loss smooth_l1, positions sincos (--loss, --positions; as the resumed run has them)", line
