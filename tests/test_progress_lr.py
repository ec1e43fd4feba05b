"""The lr of the progress lines is one quantity: the schedule's (a full-scale group's, under layer-wise decay the
head's), on the step lines of --log-every as on the epoch lines and in log.jsonl, not the lowest layer's."""

import json
import re

from cli_runs import one_torch_thread, tiny_image_folder  # noqa: F401 (autouse)
from click.testing import CliRunner

from pretexts.cli import main

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
