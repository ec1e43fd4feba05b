"""benchmarks/gpu_session.py, the script a lent GPU runs first, dry-run on the CPU at tiny sizes: every kind of item
in its plan runs and writes its table, the machine and the summary land in one folder, and what finds no time left
is listed as skipped rather than lost."""

import importlib.util
import subprocess
import sys

import pytest
from docs_blocks import ROOT

SPEC = importlib.util.spec_from_file_location("gpu_tables", ROOT / "studies" / "gpu_tables.py")
gpu_tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gpu_tables)

SCRIPT = ROOT / "benchmarks" / "gpu_session.py"


def session(out, *args, timeout=900):
    command = [sys.executable, str(SCRIPT), "--dry-run", "--out", str(out), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    return (out / "summary.md").read_text()


@pytest.mark.slow
def test_a_dry_run_measures_each_kind_of_item_into_one_folder(tmp_path):
    items = ["cuda-tests", "resnet50-128", "attention-second-order", "resnet50-128-compiled"]
    # a budget a loaded machine does not reach: under load the default 8 minutes can cut the last item short
    summary = session(tmp_path, "--minutes", "30", "--only", *items, timeout=2400)
    for item in items:
        assert f"| {item} | done |" in summary, summary
    assert "GPU: none (a dry run on the CPU)" in (tmp_path / "machine.txt").read_text()
    resnet = (tmp_path / "resnet50-128.txt").read_text()
    assert "test_resnet at 32 px, batch 4" in resnet  # the dry run's stand-in for ResNet-50 at 224 px
    for row in ("| supervised + bf16 autocast |", "| energy N=2 exact + bf16 autocast |"):
        assert row in resnet, resnet
    attention = (tmp_path / "attention-second-order.txt").read_text()
    for row in ("| math |", "| math, compiled |", "| fused forward, differentiable backward |", "| math, recomputed |"):
        assert row in attention, attention
    compiled = (tmp_path / "resnet50-128-compiled.txt").read_text()
    assert "| energy N=2 exact + bf16 autocast + compile (eager) |" in compiled and "compile time" in compiled
    assert "| supervised + bf16 autocast + compile" not in compiled  # only the exact step pays a compile
    [row] = gpu_tables.compiled_rows(tmp_path)  # what the results page's table will be read from
    assert row["backbone"] == "ResNet-50" and row["batch"] == 4 and row["compiled"] > 0 and row["compile_s"] >= 0


def test_items_that_find_no_time_left_are_listed_as_skipped(tmp_path):
    summary = session(tmp_path, "--minutes", "0.1", "--only", "vit_small-128", "swin_t-32", timeout=120)
    assert "| vit_small-128 | skipped: no time left | 0 |" in summary
    assert "| swin_t-32 | skipped: no time left | 0 |" in summary
    assert (tmp_path / "machine.txt").is_file()


def test_a_compiled_row_that_compiled_nothing_costs_no_negative_time(monkeypatch):
    """A BatchNorm backbone's restoration step runs eagerly under --compile: its warm-up can come out shorter than
    two timed steps, which printed 'compile time -0.0 s; repaid after -3 steps' (a line the tables cannot read)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # the script's sibling modules
    spec = importlib.util.spec_from_file_location("throughput", ROOT / "benchmarks" / "throughput.py")
    throughput = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(throughput)
    line = throughput.break_even("compiled", eager_s=0.050, compiled_s=0.045, warmup={"compiled": 0.080})
    assert line == "  compile time 0.0 s; repaid after 0 steps"
    assert gpu_tables.COMPILE_COST.match(line)
    line = throughput.break_even("compiled", eager_s=0.050, compiled_s=0.040, warmup={"compiled": 2.080})
    assert line == "  compile time 2.0 s; repaid after 200 steps"
