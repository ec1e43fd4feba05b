"""What a cluster job's log file shows (stderr not a terminal: click's runner, nohup, a scheduler): one progress line
per epoch with its numbers, step lines under --log-every, nothing under --quiet; --figure-every thins the figures."""

import re

from cli_runs import TRAIN, one_torch_thread, tiny_image_folder  # noqa: F401 (autouse)
from click.testing import CliRunner

from pretexts.cli import main

LINE = re.compile(
    r"^epoch (\d+)/(\d+)  step (\d+)/(\d+)  loss [\d.e+-]+  lr [\d.e+-]+  alpha [\d.e+-]+  "
    r"\d+ img/s  eta \d+:\d\d:\d\d(  held-out [\d.e+-]+x corrupted)?$"
)


def train(tmp_path, *args) -> tuple[list[str], list[str]]:
    """(progress lines, every stderr line) of a 3-epoch, 2-step-per-epoch run on 32 images."""
    data = tiny_image_folder(tmp_path / "data")
    result = CliRunner().invoke(
        main,
        [
            str(a)
            for a in TRAIN
            + [
                "--data",
                data,
                "--epochs",
                "3",
                "--max-steps-per-epoch",
                "2",
                "--workers",
                "0",
                "--monitor-every",
                "0",
                "--out",
                tmp_path / "run",
                *args,
            ]
        ],
    )
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    return [line for line in lines if line.startswith("epoch ")], lines


def test_a_piped_run_prints_one_line_per_epoch_and_the_figures_every_n_epochs(tmp_path):
    progress, _ = train(tmp_path, "--figure-every", "2", "--eval-every", "2")
    assert len(progress) == 3 and all(LINE.match(line) for line in progress), progress
    assert [LINE.match(line).group(1, 3) for line in progress] == [("1", "2"), ("2", "4"), ("3", "6")]
    assert all("held-out" in line for line in progress)  # measured every 2 steps: once in each epoch
    figures = sorted(p.name for p in (tmp_path / "run").glob("restoration_epoch*.png"))
    assert figures == ["restoration_epoch002.png", "restoration_epoch003.png"]


def test_log_every_adds_step_lines_and_quiet_prints_nothing(tmp_path):
    progress, _ = train(tmp_path, "--log-every", "1", "--figure-every", "0")
    assert [LINE.match(line).group(3) for line in progress] == ["1", "2", "3", "4", "5", "6"]
    assert all("held-out" not in line for line in progress)  # nothing measured: no ratio
    assert [p.name for p in (tmp_path / "run").glob("restoration_epoch*.png")] == ["restoration_epoch003.png"]
    progress, lines = train(tmp_path, "--quiet", "--log-every", "1", "--force")
    assert progress == [] and not any("it/s" in line or "%|" in line for line in lines)  # no lines, no bars


def test_segment_prints_its_miou_on_each_epoch_line(tmp_path):  # finetune's top-1: tests/test_finetune.py
    result = CliRunner().invoke(
        main,
        [
            "segment",
            "--from-scratch",
            "--backbone",
            "test_convnext",
            "--img-size",
            "32",
            "--data",
            "generated",
            "--max-steps",
            "5",
            "--head",
            "linear",
            "--out",
            str(tmp_path / "seg"),
        ],
    )  # 4 steps of 16 crops an epoch
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("epoch ")]
    assert [line.split("  ")[:2] for line in lines] == [["epoch 1/2", "step 4/5"], ["epoch 2/2", "step 5/5"]], lines
    assert all(re.search(r"  eta \d+:\d\d:\d\d  .*mIoU [\d.]+%?.*pixel acc [\d.]+%?$", line) for line in lines), lines


def test_finetune_and_segment_add_step_lines_under_log_every_and_print_none_under_quiet(tmp_path):
    def epoch_lines(*args):
        result = CliRunner().invoke(main, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return [line.split("  ")[:2] for line in result.stderr.splitlines() if line.startswith("epoch ")]

    segment = [
        "segment",
        "--from-scratch",
        "--backbone",
        "test_convnext",
        "--img-size",
        "32",
        "--data",
        "generated",
        "--max-steps",
        "5",
        "--head",
        "linear",
    ]  # 4 steps an epoch
    assert epoch_lines(*segment, "--log-every", "2", "--out", tmp_path / "seg") == [
        ["epoch 1/2", "step 2/5"],
        ["epoch 1/2", "step 4/5"],
        ["epoch 2/2", "step 5/5"],
    ]
    assert epoch_lines(*segment, "--quiet", "--log-every", "2", "--out", tmp_path / "seg2") == []
    finetune = [
        "finetune",
        "--from-scratch",
        "--backbone",
        "test_convnext",
        "--data",
        tiny_image_folder(tmp_path / "d"),
        "--epochs",
        "2",
        "--max-steps-per-epoch",
        "3",
        "--batch-size",
        "8",
        "--workers",
        "0",
    ]
    assert epoch_lines(*finetune, "--log-every", "2", "--out", tmp_path / "ft") == [
        ["epoch 1/2", "step 2/6"],
        ["epoch 1/2", "step 3/6"],
        ["epoch 2/2", "step 4/6"],
        ["epoch 2/2", "step 6/6"],
    ]
    assert epoch_lines(*finetune, "--quiet", "--log-every", "2", "--out", tmp_path / "ft2") == []


def test_a_resumed_run_may_change_how_often_it_reports():
    import dataclasses

    from pretexts.engine.evaluation.finetune_config import FinetuneConfig
    from pretexts.engine.evaluation.segmentation.config import SegmentConfig
    from pretexts.engine.training.config import PretrainConfig
    from pretexts.engine.training.resume_config import (
        FINETUNE_MAY_CHANGE,
        PRETRAIN_MAY_CHANGE,
        SEGMENT_MAY_CHANGE,
        check_resumable,
    )

    saved = PretrainConfig(method_args={"positions": "sincos"})  # a run's config records what its positions were
    check_resumable(
        saved.to_dict(),
        dataclasses.replace(saved, figure_every=50, log_every=100),
        PRETRAIN_MAY_CHANGE,
        "checkpoint.pt",
    )
    for config, may_change in ((FinetuneConfig, FINETUNE_MAY_CHANGE), (SegmentConfig, SEGMENT_MAY_CHANGE)):
        saved = config(**{"checkpoint": "run/checkpoint.pt"} | ({"data": "ade"} if config is SegmentConfig else {}))
        check_resumable(saved.to_dict(), dataclasses.replace(saved, log_every=20, quiet=True), may_change, "x.pt")
