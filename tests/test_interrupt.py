"""Kills and signals lose nothing: SIGKILL mid-save leaves the last checkpoint, SIGTERM and Ctrl-C
save one at the current step, and --resume continues to the weights of a run never stopped. The tests that signal a
`pretexts train` process of its own are `slow` (an interpreter start each); the same stop and resume in one process
run with the rest."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_runs import ONE_STEP, TRAIN, one_torch_thread, run_cli, start_pretexts, tiny_image_folder  # noqa: F401

from pretexts.engine import EnergyMethod, PretrainConfig, Pretrainer, atomic_save, load_checkpoint
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.training.interrupt import StopSignals

ROOT = Path(__file__).resolve().parents[1]
RUN = TRAIN + ["--epochs", "2", "--max-steps-per-epoch", "4", "--seed", "1"]  # 8 steps


def same_weights(a, b) -> bool:
    a, b = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---- SIGKILL during a save ----------------------------------------------------------------------
SAVERS = """
import os, sys, torch
from pretexts.engine.training.checkpoint import atomic_save
for line in sys.stdin:  # one saving child per line; this parent runs no torch op, so it can fork safely
    pid = os.fork()
    if pid == 0:
        for number in range(10**6):  # a 32 MB checkpoint whose every value is the save's number
            atomic_save({"number": number, "weights": torch.full((8 << 20,), float(number))}, sys.argv[1])
        os._exit(0)
    print(pid, flush=True)
    os.waitpid(pid, 0)
    print("dead", flush=True)
"""


def python(script: str, *args, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=ROOT, **kw)


def test_sigkill_at_any_moment_leaves_a_loadable_checkpoint(tmp_path):
    path, rng = tmp_path / "checkpoint.pt", random.Random(0)
    savers = python(SAVERS, path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    killed_mid_write = 0
    try:
        for trial in range(5):
            savers.stdin.write("save\n")
            savers.stdin.flush()
            pid = int(savers.stdout.readline())
            while not path.exists() or trial == 0 and not list(tmp_path.glob(".checkpoint.pt.*.tmp")):
                time.sleep(0.001)  # the first time, kill exactly while a temporary file is being written
            time.sleep(0 if trial == 0 else rng.uniform(0.0, 0.5))
            os.kill(pid, signal.SIGKILL)
            assert savers.stdout.readline() == "dead\n"
            killed_mid_write += bool(list(tmp_path.glob(".checkpoint.pt.*.tmp")))
            ckpt = torch.load(path, weights_only=True)
            assert (ckpt["weights"] == ckpt["number"]).all()
    finally:
        savers.stdin.close()
        savers.wait(timeout=60)
    assert killed_mid_write >= 1
    atomic_save({"number": -1}, path)  # the next save removes what the killed ones left
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


# ---- SIGTERM / Ctrl-C: save, exit, resume to the same weights -----------------------------------


def log_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tiny_image_folder(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def straight(tmp_path_factory, data) -> Path:
    """The uninterrupted run every stopped-and-resumed one must equal."""
    out = tmp_path_factory.mktemp("straight")
    result, _ = run_cli(RUN + ["--data", str(data), "--workers", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def wait_for_lines(log: Path, count: int, process, timeout: float = 300) -> None:
    end = time.time() + timeout
    while time.time() < end and process.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"{log} did not reach {count} lines")


def stop_a_cli_run(args: list, out: Path, sig: signal.Signals) -> dict:
    """Start `pretexts train` in a subprocess, send `sig` after 2 log lines; return the checkpoint."""
    args = args + ["--out", str(out)]
    process = start_pretexts(args, threads=torch.get_num_threads())  # as the runs it is compared with
    try:
        wait_for_lines(out / "log.jsonl", 2, process)
        os.killpg(process.pid, sig) if sig == signal.SIGINT else process.send_signal(sig)
        _, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:  # a failed wait: end the run and its loader workers
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 128 + sig, err
    assert f"stopped by {sig.name} after step" in err and "--resume" in err and "Traceback" not in err
    ckpt = load_checkpoint(out / "checkpoint.pt")
    assert 2 <= ckpt["global_step"] < 8 and ckpt["batch"] == ckpt["global_step"] % 4
    assert len(log_rows(out)) == ckpt["global_step"]
    return ckpt


@pytest.mark.slow  # a `pretexts train` process of its own, signalled
def test_sigterm_saves_and_resume_equals_an_uninterrupted_run(tmp_path, data, straight):
    """SIGTERM, as a job scheduler sends before it kills."""
    args = RUN + ["--data", str(data), "--workers", "0"]
    stop_a_cli_run(args, tmp_path, signal.SIGTERM)
    result, _ = run_cli(args + ["--out", str(tmp_path), "--resume"])
    assert result.exit_code == 0, result.output
    assert same_weights(tmp_path / "checkpoint.pt", straight / "checkpoint.pt")
    assert log_rows(tmp_path) == log_rows(straight)  # every step once, with the same loss


@pytest.mark.slow  # a `pretexts train` process of its own, signalled
def test_ctrl_c_with_loader_workers_saves(tmp_path, data):
    """Ctrl-C signals the whole process group: the loader workers ignore it, the main process saves."""
    stop_a_cli_run(RUN + ["--data", str(data), "--workers", "2"], tmp_path, signal.SIGINT)


class DropPathEnergy(EnergyMethod):
    """A model that draws from the global RNG every step (drop-path), the hard case for a resume."""

    def build_model(self):
        return create_energy_model("test_convnext", img_size=32, drop_path_rate=0.5)


class DropPathModel(Pretrainer):
    def __init__(self, cfg):
        super().__init__(cfg, method=DropPathEnergy)

    def figure(self, path):  # not under test here; matplotlib is the slowest part of a tiny run
        pass


class TermAtStep2(DropPathModel):
    def train_step(self, images):
        stats = super().train_step(images)
        if self.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return stats


def test_mid_epoch_stop_and_resume_in_process_with_drop_path(tmp_path):
    def config(out, **kw):
        return PretrainConfig(
            backbone="test_convnext",
            epochs=1,
            batch_size=8,
            max_steps_per_epoch=4,
            workers=0,
            out=str(out),
            eval_images=8,
            figure_images=2,
            seed=2,
            **kw,
        )

    before = signal.getsignal(signal.SIGTERM)
    results = TermAtStep2(config(tmp_path / "stopped")).run()
    assert results["interrupted"] == "SIGTERM" and results["exit_code"] == 143
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back
    ckpt = load_checkpoint(tmp_path / "stopped" / "checkpoint.pt")
    assert (ckpt["epoch"], ckpt["batch"], ckpt["global_step"]) == (0, 2, 2)
    DropPathModel(config(tmp_path / "stopped", resume="auto")).run()
    DropPathModel(config(tmp_path / "straight")).run()
    assert same_weights(tmp_path / "stopped" / "checkpoint.pt", tmp_path / "straight" / "checkpoint.pt")


def test_stop_signals_set_a_flag_and_a_second_ctrl_c_raises():
    before = signal.getsignal(signal.SIGINT)
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested and stop.exit_code == 130
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_signal_an_inner_stop_caught_reaches_the_enclosing_one():
    """A run inside another (compare's cells) that caught a signal too late to act on hands it on as it exits;
    with nothing enclosing it is dropped, and the handlers from before come back either way."""
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as outer:
        with StopSignals() as inner:
            os.kill(os.getpid(), signal.SIGTERM)
        assert inner.signal == signal.SIGTERM and outer.signal == signal.SIGTERM and outer.exit_code == 143
        with StopSignals() as quiet:
            pass
        assert not quiet.requested and outer.signal == signal.SIGTERM  # a later inner run that caught none
    assert signal.getsignal(signal.SIGTERM) is before
    with StopSignals() as alone:
        os.kill(os.getpid(), signal.SIGTERM)
    assert alone.requested and signal.getsignal(signal.SIGTERM) is before


def test_a_signal_in_a_runs_last_step_lets_it_finish_as_usual(tmp_path, data, monkeypatch):
    """A top-level run that catches a signal in its last step has nothing left to save by stopping: it finishes,
    writes its results and exits 0, with no "stopped by" line."""
    train_step = Pretrainer.train_step

    def last_step(self, images):
        stats = train_step(self, images)
        os.kill(os.getpid(), signal.SIGTERM)  # ONE_STEP: its one step is the last
        return stats

    monkeypatch.setattr(Pretrainer, "train_step", last_step)
    result, _ = run_cli(ONE_STEP + ["--data", data, "--out", tmp_path])
    assert result.exit_code == 0 and "stopped by" not in result.output, result.output
    assert (tmp_path / "results.json").is_file() and load_checkpoint(tmp_path / "checkpoint.pt")["global_step"] == 1


@pytest.mark.slow  # a `pretexts train` process of its own, signalled
def test_sigkill_of_a_training_run_leaves_a_checkpoint_that_resumes_to_the_same_weights(tmp_path, data, straight):
    """`kill -9` of `pretexts train` after its first epoch's checkpoint, during the second epoch: the
    epoch-1 checkpoint loads, and --resume ends with the weights of the run never killed."""
    args = RUN + ["--data", str(data), "--workers", "0", "--out", str(tmp_path)]
    same_threads = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    process = subprocess.Popen(
        [sys.executable, "-m", "pretexts", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=same_threads,
    )
    try:
        wait_for_lines(tmp_path / "log.jsonl", 5, process)  # step 5: epoch 2 is under way
    finally:
        process.kill()
        process.wait()
    assert load_checkpoint(tmp_path / "checkpoint.pt")["epoch"] == 1
    result, _ = run_cli(args + ["--resume"])
    assert result.exit_code == 0, result.output
    assert same_weights(tmp_path / "checkpoint.pt", straight / "checkpoint.pt")
