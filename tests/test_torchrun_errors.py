"""Under torchrun: a user error is printed once (rank 0's), DDP's gradient buckets take a fine-tuned ConvNeXt's
gradients without a stride warning, and the start lines name the process count."""

import os
import signal
import subprocess
import sys
import warnings

import pytest
import timm
import torch
import torch.distributed as dist
from click.testing import CliRunner

import pretexts.cli as cli
from pretexts.cli import main
from pretexts.cli.probe_cmd import then_say
from pretexts.engine.training import distributed

BAD_BATCH = ["train", "--backbone", "test_convnext", "--batch-size", "0", "--out", "unused"]


def as_rank(monkeypatch, rank: int, world: int = 2) -> list:
    """This process seen as torchrun's `rank` of `world`; the wait a rank > 0 makes is recorded, not slept, with the
    SIGTERM handler in force during it."""
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    waits = []
    monkeypatch.setattr(cli.time, "sleep", lambda seconds: waits.append((seconds, signal.getsignal(signal.SIGTERM))))
    return waits


@pytest.fixture
def sigterm_kept():
    """The test process's SIGTERM handler, put back after a rank > 0 set the default one."""
    handler = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, handler)


def test_rank_zero_prints_a_user_error_at_once(monkeypatch):
    waits = as_rank(monkeypatch, 0)
    result = CliRunner().invoke(main, BAD_BATCH)
    assert result.exit_code == 2 and waits == []
    assert result.output.startswith("Error: --batch-size (batch_size) must be in"), result.output


def test_another_rank_waits_quietly_for_torchrun_then_names_itself(monkeypatch, sigterm_kept):
    # rank 0 raises the same error and exits: torchrun then ends this rank (SIGTERM, default action) during the wait,
    # so the line is printed once; a rank still running after the wait hit an error of its own and says which rank
    waits = as_rank(monkeypatch, 3, world=8)
    result = CliRunner().invoke(main, BAD_BATCH)
    assert waits == [(cli.RANK_ERROR_WAIT_S, signal.SIG_DFL)] and cli.RANK_ERROR_WAIT_S >= 5
    assert result.exit_code == 2
    assert result.output.startswith("Error (rank 3): --batch-size (batch_size) must be in"), result.output


def test_another_rank_waits_on_a_usage_error_too(monkeypatch, sigterm_kept):
    waits = as_rank(monkeypatch, 1)
    result = CliRunner().invoke(main, ["train", "--bogus-option"])
    assert len(waits) == 1 and result.exit_code == 2
    assert result.output.startswith("Error (rank 1): No such option '--bogus-option'"), result.output


def test_start_notes_name_the_process_count(monkeypatch, tmp_path):
    said = []
    say = then_say(said.append, ["config c.yaml: lr 0.1"], cli.processes_note(4))
    say("probing x on 'sample'")
    say("features: 8 train")
    assert said == ["probing x on 'sample' on 4 processes", "config c.yaml: lr 0.1", "features: 8 train"]
    assert cli.processes_note(1) == ""
    # probe's own start line, in one process that reads the world size as torchrun's 2
    monkeypatch.setattr(distributed, "launched_world", lambda: 2)
    args = ["probe", "--from-scratch", "--backbone", "test_convnext", "--probe", "knn", "--knn-k", "5"]
    result = CliRunner().invoke(main, [*args, "--workers", "0", "--quiet", "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("probing test_convnext at random init") and first.endswith(" px on 2 processes"), first


@pytest.fixture
def one_process_group(tmp_path):
    """A gloo process group of one process, so DDP's reducer runs here."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_buckets_take_a_convnext_classifiers_gradients_as_they_come(one_process_group):
    # timm's LayerNorm2d permutes to channels-last and back, so each depthwise conv's weight gradient comes
    # with strides (49, 1, 7, 1), its weight's being (49, 49, 7, 1): the same memory, but DDP warned on every rank
    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", num_classes=3)
    replicated = distributed.replicate(model, torch.device("cpu"))
    images, labels = torch.randn(2, 3, 32, 32), torch.tensor([0, 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = distributed.through(
            replicated, lambda x, y: torch.nn.functional.cross_entropy(model(x), y), images, labels
        )
        loss.backward()
    differ = [name for name, p in model.named_parameters() if p.grad.stride() != p.stride()]
    assert differ == [] and not [w for w in caught if "Grad strides" in str(w.message)], differ
    # a gradient laid out otherwise in a dimension that counts is left as it comes
    grad = torch.zeros(4, 1, 3, 3).permute(0, 1, 3, 2)
    assert distributed.with_strides((9, 9, 3, 1), grad) is grad


@pytest.mark.slow
def test_a_user_error_is_printed_once_under_torchrun(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "pretexts"]
    train = ["train", "--data", "sample", "--epochs", "1", "--batch-size", "9", "--max-steps-per-epoch", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*command, *train, "--workers", "0", "--out", str(tmp_path / "odd")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    said = done.stdout + done.stderr
    errors = [line for line in said.splitlines() if line.startswith("Error")]
    assert done.returncode != 0 and errors == [
        "Error: --batch-size 9 is the global batch and must split evenly over 2 processes; use a multiple of 2."
    ], said[-3000:]
    assert "ChildFailedError" in said  # torchrun's own report follows, which the package cannot suppress


def test_rank_and_world_size_set_by_another_launcher_make_no_rank_that_waits(monkeypatch):
    """A Kubeflow pod sets RANK and WORLD_SIZE with no torchrun to end the others: its error is said at once."""
    waits = as_rank(monkeypatch, 3)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    result = CliRunner().invoke(main, ["train", "--bogus-option"])
    assert not waits and result.output.startswith("Error: No such option '--bogus-option'"), result.output
