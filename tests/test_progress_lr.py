"""The lr of the progress lines is one quantity: the schedule's (a full-scale group's, under layer-wise decay the
head's), on the step lines of --log-every as on the epoch lines and in log.jsonl, not the lowest layer's."""

import json
import math
import re

import pytest
from cli_runs import one_torch_thread, tiny_image_folder  # noqa: F401 (autouse)
from click.testing import CliRunner

from pretexts.cli import main
from pretexts.engine import PretrainConfig, Pretrainer
from pretexts.engine.training.optimizer_step import scheduled_lr

LR = re.compile(r"^epoch \d+/\d+  step (\d+)/(\d+)  .*  lr ([\d.e+-]+)  ")


def lrs(args: list) -> list[tuple[int, int, str]]:
    """(step, total steps, lr as printed) of each progress line of a run piped as a cluster's is."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    found = [LR.match(line) for line in result.stderr.splitlines() if line.startswith("epoch ")]
    return [(int(m[1]), int(m[2]), m[3]) for m in found if m]


def test_finetune_step_lines_show_the_lr_its_epoch_lines_and_log_show(tmp_path):
    """A constant lr (no warm-up, the cosine's end at its peak) over layer-decayed groups: every line says it."""
    out = tmp_path / "ft"
    printed = lrs(
        [
            *("finetune", "--from-scratch", "--backbone", "test_convnext", "--data", tiny_image_folder(tmp_path / "d")),
            *("--epochs", "2", "--max-steps-per-epoch", "3", "--batch-size", "8", "--workers", "0"),
            *("--lr", "1e-3", "--min-lr", "1e-3", "--warmup-epochs", "0", "--layer-decay", "0.5", "--log-every", "1"),
            *("--out", out),
        ]
    )
    assert [step for step, _, _ in printed] == [1, 2, 3, 4, 5, 6], printed  # step lines and epoch lines
    assert {lr for _, _, lr in printed} == {"1.00e-03"}, printed
    logged = [json.loads(line)["lr"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert logged == [1e-3, 1e-3]


def test_segment_step_lines_follow_the_schedule_its_epoch_lines_show(tmp_path):
    """Segmentation's linear decay to 0 over 5 steps, its backbone's groups layer-decayed: after step k each line
    says 1e-3 x (1 - k / 5), the head's lr."""
    printed = lrs(
        [
            *("segment", "--from-scratch", "--backbone", "test_convnext", "--img-size", "32", "--data", "generated"),
            *("--max-steps", "5", "--head", "linear", "--lr", "1e-3", "--log-every", "1", "--out", tmp_path / "seg"),
        ]
    )
    assert len(printed) >= 5, printed
    assert all(lr == f"{1e-3 * (1 - step / total):.2e}" for step, total, lr in printed), printed
    steps = [step for step, _, _ in printed]  # the last step, ending an epoch cut short by --max-steps, once
    assert len(steps) == len(set(steps)), printed


def warm_cosine(step: int, peak: float, end: float, warmup: int, total: int) -> float:
    """timm's warm-up then cosine (warmup_prefix False, the cosine spanning the warm-up): a linear rise from 0 over
    `warmup` steps, then the cosine from `peak` at step 0 to `end` at step `total`."""
    if step < warmup:
        return peak * step / warmup
    return end + 0.5 * (peak - end) * (1 + math.cos(math.pi * min(step, total) / total))


def test_finetune_lr_rises_through_its_warm_up_then_follows_the_cosine(tmp_path):
    """4 epochs of 2 steps, 1 warm-up epoch: the lr of step 1 is 0, of step 2 half the peak, then the cosine's
    (a line after step k shows step k + 1's lr)."""
    printed = lrs(
        [
            *("finetune", "--from-scratch", "--backbone", "test_convnext", "--data", tiny_image_folder(tmp_path / "d")),
            *("--epochs", "4", "--max-steps-per-epoch", "2", "--batch-size", "8", "--workers", "0"),
            *("--lr", "1e-3", "--min-lr", "0", "--warmup-epochs", "1", "--log-every", "1", "--out", tmp_path / "ft"),
        ]
    )
    assert [step for step, _, _ in printed] == list(range(1, 9)), printed
    expected = [f"{warm_cosine(step, 1e-3, 0.0, 2, 8):.2e}" for step in range(1, 9)]
    assert [lr for _, _, lr in printed] == expected, printed
    assert expected[:3] == ["5.00e-04", "8.54e-04", "6.91e-04"]  # half the peak inside the warm-up


@pytest.mark.parametrize("schedule, end", [("cosine", 0.0), ("constant", 1e-3)])
def test_pretraining_lr_rises_from_0_over_its_warm_up_then_follows_its_schedule(tmp_path, schedule, end):
    """The schedule the pretrainer builds, walked step by step: 0 at the first step, a linear rise over the 4
    warm-up steps (2 epochs of 2), then the cosine to --min-lr or the constant peak."""
    cfg = PretrainConfig(
        backbone="test_convnext",
        data=str(tiny_image_folder(tmp_path / "d")),
        batch_size=8,
        epochs=6,
        max_steps_per_epoch=2,
        warmup_epochs=2.0,
        lr=1e-3,
        schedule=schedule,
        workers=0,
        out=str(tmp_path / "run"),
    )
    trainer = Pretrainer(cfg)
    assert scheduled_lr(trainer.optimizer) == 0.0  # the lr the first step takes
    walked = []
    for step in range(13):
        trainer.scheduler.step_update(step)
        walked.append(scheduled_lr(trainer.optimizer))
    assert walked == pytest.approx([warm_cosine(step, 1e-3, end, 4, 12) for step in range(13)], abs=1e-12)
    assert walked[:4] == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4], abs=1e-12)  # a quarter of the peak a step
