"""A requeued job takes over the lock its earlier start left on another node; log.jsonl is strict JSON; the "wrote
OUT/" line orders numbered files by number and counts a series with gaps."""

import json

import pytest

from pretexts.cli import written_files
from pretexts.engine.training import run_folder
from pretexts.engine.training.experiment_log import log_line
from pretexts.engine.training.run_folder import RunLock
from pretexts.errors import OutputError

SCHEDULER = ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def left_lock(out, **job) -> None:
    """OUT/.lock as a process on node-a17 leaves it when it is SIGKILLed (or its node is lost)."""
    out.mkdir(exist_ok=True)
    holder = {"pid": 4242, "host": "node-a17", "command": "train", "since": "2026-01-01 00:00:00", "job": job}
    (out / ".lock").write_text(json.dumps(holder))


@pytest.fixture
def on_node_b(monkeypatch):
    """This process on another node (node-b02), in no scheduler's job until a test sets one."""
    monkeypatch.setattr(run_folder.socket, "gethostname", lambda: "node-b02")
    for name in SCHEDULER:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_requeued_slurm_job_takes_over_the_lock_of_its_earlier_start(tmp_path, on_node_b, capsys):
    # the docs' sbatch recipe: torchrun's --rdzv-id is the SLURM job id; the requeue counts SLURM's restarts up
    left_lock(tmp_path, SLURM_JOB_ID="777", TORCHELASTIC_RUN_ID="777", TORCHELASTIC_RESTART_COUNT="0")
    for name, value in zip(SCHEDULER, ("777", "1", "777", "0")):
        on_node_b.setenv(name, value)
    with RunLock(tmp_path, "train"):
        held = json.loads((tmp_path / ".lock").read_text())
        assert held["host"] == "node-b02" and held["job"]["SLURM_RESTART_COUNT"] == "1"
    err = capsys.readouterr().err
    assert "took over the lock" in err and "pid 4242 on node-a17" in err
    assert not (tmp_path / ".lock").exists()


def test_a_requeued_slurm_job_under_torchrun_standalone_takes_over_the_lock(tmp_path, on_node_b):
    # `torchrun --standalone` draws a new run id at every start: the SLURM job id alone says it is the same job
    left_lock(tmp_path, SLURM_JOB_ID="777", SLURM_RESTART_COUNT="0", TORCHELASTIC_RUN_ID="a1b2")
    for name, value in zip(SCHEDULER, ("777", "1", "c3d4", "0")):
        on_node_b.setenv(name, value)
    with RunLock(tmp_path, "train"):
        assert json.loads((tmp_path / ".lock").read_text())["host"] == "node-b02"


def test_an_elastic_restart_of_a_torchrun_run_takes_over_the_lock(tmp_path, on_node_b):
    left_lock(tmp_path, TORCHELASTIC_RUN_ID="vit-run", TORCHELASTIC_RESTART_COUNT="0")
    on_node_b.setenv("TORCHELASTIC_RUN_ID", "vit-run")
    on_node_b.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    with RunLock(tmp_path, "train"):
        assert json.loads((tmp_path / ".lock").read_text())["host"] == "node-b02"


@pytest.mark.parametrize(
    "held, mine",
    [
        ({"SLURM_JOB_ID": "777"}, {"SLURM_JOB_ID": "778", "SLURM_RESTART_COUNT": "1"}),  # another job
        ({"SLURM_JOB_ID": "777"}, {"SLURM_JOB_ID": "777"}),  # the same start: another task of this job may write
        ({"SLURM_JOB_ID": "777", "SLURM_RESTART_COUNT": "2"}, {"SLURM_JOB_ID": "777", "SLURM_RESTART_COUNT": "1"}),
        ({}, {}),  # no scheduler: whether a process on another host lives cannot be told
        ({"TORCHELASTIC_RUN_ID": "none"}, {"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "1"}),
    ],
)
def test_a_lock_on_another_host_of_another_job_or_the_same_start_is_kept(tmp_path, on_node_b, held, mine):
    left_lock(tmp_path, **held)
    for name, value in mine.items():
        on_node_b.setenv(name, value)
    with pytest.raises(OutputError, match=r"being written by `pretexts train` \(pid 4242 on node-a17.*delete"):
        RunLock(tmp_path, "train").__enter__()
    assert json.loads((tmp_path / ".lock").read_text())["host"] == "node-a17"


def test_every_log_line_is_strict_json():
    line = log_line({"step": 6, "loss": float("nan"), "grad_norm": float("inf"), "held_out": {"mse": [1.0, -1e999]}})
    refuse = lambda constant: pytest.fail(f"log.jsonl holds the non-JSON token {constant}")  # noqa: E731
    assert json.loads(line, parse_constant=refuse) == {
        "step": 6,
        "loss": None,
        "grad_norm": None,
        "held_out": {"mse": [1.0, None]},
    }
    assert line.endswith("\n") and line.count("\n") == 1


def test_a_numbered_series_is_ordered_by_number_and_counted_when_it_has_gaps(tmp_path):
    for epoch in range(1, 1201):
        (tmp_path / f"restoration_epoch{epoch:03d}.png").touch()
    (tmp_path / "checkpoint.pt").touch()
    assert written_files(tmp_path) == "checkpoint.pt, restoration_epoch001-1200.png (1200 files)"
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    for epoch in range(50, 401, 50):  # --figure-every 50 over 400 epochs
        (sparse / f"restoration_epoch{epoch:03d}.png").touch()
    assert written_files(sparse) == "restoration_epoch050-400.png (8 files)"
    for epoch in (1, 2, 3):
        (sparse / f"monitor_epoch{epoch:03d}.png").touch()
    assert written_files(sparse) == "monitor_epoch001-003.png, restoration_epoch050-400.png (8 files)"
