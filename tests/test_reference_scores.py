"""Every score beside its reference (chance level, the Wilson 95 % interval its val images allow, random init or the
command that measures it), and messages about the run at hand (the collapse warning's advice, the start line)."""

import json

import pytest
import torch
from cli_runs import TRAIN, one_torch_thread, run_cli, tiny_image_folder  # noqa: F401 (a fixture)
from pretrained_checkpoints import write_checkpoint

import pretexts
from pretexts.engine import PretrainConfig
from pretexts.engine.measures.reference import Reference, chance_level, final_and_best_line, wilson_interval
from pretexts.engine.methods import METHODS
from pretexts.engine.methods.autoencoder import AutoencoderMethod
from pretexts.engine.training.monitor import collapse_warning

# Newcombe (1998), "Two-sided confidence intervals for the single proportion", Table I, method 3 (Wilson score)
NEWCOMBE = [
    ((81, 263), (0.2553, 0.3662)),
    ((15, 148), (0.0624, 0.1605)),
    ((0, 20), (0.0, 0.1611)),
    ((1, 29), (0.0061, 0.1718)),
]


@pytest.mark.parametrize(("counts", "expected"), NEWCOMBE)
def test_the_wilson_interval_matches_newcombes_table(counts, expected):
    low, high = wilson_interval(*counts)
    assert (round(low, 4), round(high, 4)) == expected


def test_the_interval_of_a_score_on_80_images_and_of_nothing_measured():
    reference = Reference.of([i % 10 for i in range(80)], 10)  # the embedded sample's val/: 8 images a class
    low, high = reference.interval(15.0)  # 12 of 80
    assert (round(low, 1), round(high, 1)) == (8.8, 24.4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert (
        reference.score(15.0)
        == "15.00% (95% CI 8.8-24.4 on 80 val images, 10 classes; chance 10.0%, inside the interval)"
    )
    assert "inside" not in reference.score(40.0)


def test_chance_is_one_over_the_classes_when_balanced_else_the_majority_share():
    assert chance_level([0, 1, 2, 3] * 5, 4) == (chance := chance_level([3, 2, 1, 0] * 5, 4))
    assert (chance.percent, chance.rule) == (25.0, "1/classes")
    unbalanced = chance_level([0] * 6 + [1] * 3 + [2], 3)
    assert (unbalanced.percent, unbalanced.rule) == (60.0, "majority class")
    assert "the majority class" in unbalanced.describe()
    missing = chance_level([0, 0, 1, 1], 3)  # a class without a val image: always answering 0 gets half
    assert (missing.percent, missing.rule) == (50.0, "majority class")


def test_a_random_init_probe_prints_chance_and_intervals_and_records_them(tmp_path):
    out = tmp_path / "probe"
    args = ["probe", "--from-scratch", "--backbone", "test_convnext", "--data", "sample", "--probe", "linear"]
    result, _ = run_cli([*args, "--probe", "knn", "--epochs", "2", "--workers", "0", "--quiet", "--out", out])
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    top1 = results["linear"]["top1"]
    low, high = results["reference"]["ci95"]["linear"]["top1"]
    assert low <= top1 <= high and high - low > 10  # 80 images allow no finer
    assert (
        f"linear probe top-1: {top1:.2f}% (95% CI {low:.1f}-{high:.1f} on 80 val images, 10 classes; chance 10.0%"
        in (result.output)
    )
    assert "(95% CIs on 80 val images, 10 classes; chance 10.0%" in result.output and "k=20 " in result.output
    assert set(results["reference"]["ci95"]["knn"]) == {"k=20", "k=200"}
    assert (results["reference"]["chance_top1"], results["reference"]["chance_rule"]) == (10.0, "1/classes")
    assert "random init: this run (--from-scratch) is the reference" in result.output


def test_a_checkpoints_probe_says_how_to_measure_random_init(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext")
    out = tmp_path / "probe"
    result, _ = run_cli(["probe", "--checkpoint", ckpt, "--epochs", "1", "--workers", "0", "--quiet", "--out", out])
    assert result.exit_code == 0, result.output
    hint = "`pretexts probe --from-scratch --backbone test_convnext --img-size 32 --data sample`"
    assert f"random init not measured here: {hint}" in result.output
    reference = json.loads((out / "results.json").read_text())["reference"]
    assert reference["random_init"].startswith("random init not measured")


def test_the_fine_tune_line_under_the_scores():
    reference = {
        "val_images": 80,
        "chance_top1": 10.0,
        "chance_rule": "1/classes",
        "ci95": {"final_top1": [49.1, 70.1], "best_top1": [59.3, 79.0]},
        "random_init": "random init: this run (--from-scratch) is the reference",
    }
    lines = final_and_best_line(reference).splitlines()
    assert lines[0] == (
        "  95% CI final 49.1-70.1, best 59.3-79.0 on 80 val images (the best epoch is picked on them, so it reads "
        "high); chance 10.0%"
    )
    assert lines[1] == "  random init: this run (--from-scratch) is the reference"
    same = {**reference, "ci95": {"final_top1": [49.1, 70.1], "best_top1": [49.1, 70.1]}}
    assert final_and_best_line(same).startswith("  95% CI 49.1-70.1 on 80 val images; chance 10.0%\n")


def method_of(name: str, **task_args):
    cfg = PretrainConfig(method=name, backbone="test_convnext", task="random-mask", task_args=task_args)
    return METHODS.get(name)(cfg, pretexts.create_pretext(cfg.task, **cfg.task_args), torch.device("cpu"))


def test_the_autoencoders_collapse_warning_is_about_the_autoencoder():
    line = collapse_warning(method_of("ae", fill="black"), 50, 0.9)
    assert "energy" not in line and "brightness" not in line
    assert "task 'random-mask' leaves open to method 'ae'" in line and "--task-arg" in line and "90%" in line


def test_the_energy_methods_warning_names_its_shortcut_only_where_the_task_opens_it():
    black = collapse_warning(method_of("energy", fill="black"), 50, 0.9)
    assert "black mask boxes" in black and "brightness" in black and "fill=gray" in black
    gray = collapse_warning(method_of("energy", fill="gray"), 50, 0.9)
    assert "brightness" not in gray and "try another task (--task)" in gray


class IgnoresTheTask(AutoencoderMethod):
    """A plugin that corrupts its own way and says only that (no `corruption` of its own)."""

    uses_task = False


def test_a_method_that_ignores_the_task_names_no_task(tmp_path):
    line = collapse_warning(method_of("mae"), 50, 0.9)
    assert "random-mask" not in line and "--method-arg" in line
    METHODS.register("test-ignores-task")(IgnoresTheTask)
    try:
        args = ["--method", "test-ignores-task", "--data", tiny_image_folder(tmp_path / "data"), "--epochs", "1"]
        result, _ = run_cli([*TRAIN, *args, "--workers", "0", "--monitor-every", "0", "--out", tmp_path / "run"])
    finally:
        METHODS.table.pop("test-ignores-task")
    assert result.exit_code == 0, result.output
    start = next(line for line in result.output.splitlines() if line.startswith("pretraining "))
    assert "random-mask" not in start and "test-ignores-task's own corruption (--task unused)" in start, start
