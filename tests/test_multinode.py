"""Two torchrun agents on this machine, `--nnodes 2 --nproc-per-node 1` over the c10d rendezvous on 127.0.0.1 (gloo,
CPU), train as one process does with the same global batch, and stop on SIGTERM as a scheduler stops a job: the
multi-node path (one agent per node, ranks handed out by the rendezvous) run for real, short of a second machine and
of NCCL.

The settings are tests/test_distributed.py's: colorization is deterministic per image and convnext_atto has no
BatchNorm, so two ranks of 4 images and one process of 8 compute the same mean loss, and DDP's averaged gradient is
its gradient. The lr is constant, so the run stopped at step K holds the weights of one process trained K steps."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
import torch
from test_distributed import assert_trained_alike

from pretexts.engine import PretrainConfig, Pretrainer, load_checkpoint

SETTINGS = {
    "backbone": "convnext_atto",
    "task": "colorization",
    "data": "sample",
    "batch_size": 8,
    "epochs": 1,
    "workers": 0,
    "warmup_epochs": 0.0,
    "lr": 1e-3,
    "schedule": "constant",  # a step's lr does not depend on how many steps the run has
    "eval_images": 8,  # the held-out report and figures are rank 0's alone: small, so the test stays short
    "figure_images": 2,
    "monitor_every": 0,
}
STEPS = 40  # far more than are taken before the SIGTERM lands


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_two_agents(out) -> list[subprocess.Popen]:
    """`torchrun --nnodes 2 --nproc-per-node 1 ... -m pretexts train` started twice, as on two nodes; both agents
    meet at the c10d store that the first to bind 127.0.0.1:PORT hosts."""
    endpoint, run_id = f"127.0.0.1:{free_port()}", f"multinode-{uuid.uuid4().hex[:8]}"
    options = [f"--{key.replace('_', '-')}={value}" for key, value in SETTINGS.items()]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    agents = []
    for node in (0, 1):
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
            "--rdzv-conf", "join_timeout=60", "--local-addr", "127.0.0.1", "--max-restarts", "0",
            "-m", "pretexts", "train", *options, f"--max-steps-per-epoch={STEPS}", f"--out={out}",
        ]  # fmt: skip
        agents.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    return agents


def logged_steps(out) -> int:
    log = out / "log.jsonl"
    return len(log.read_text().splitlines()) if log.is_file() else 0


def sigterm_after_two_steps(agents, out) -> list[tuple[int, str, str]]:
    """SIGTERM to both agents once two steps are logged (as SLURM signals every node's task); each agent's
    (exit code, stdout, stderr)."""
    finished = []
    try:
        deadline = time.time() + 240
        while logged_steps(out) < 2 and time.time() < deadline and all(a.poll() is None for a in agents):
            time.sleep(0.1)
        for agent in agents:
            agent.send_signal(signal.SIGTERM)
        for agent in agents:
            stdout, stderr = agent.communicate(timeout=120)
            finished.append((agent.returncode, stdout, stderr))
    finally:
        for agent in agents:  # one agent failed or hung: the other must not wait out its join timeout
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    return finished


@pytest.mark.slow
def test_two_agents_stopped_by_sigterm_hold_one_process_weights(tmp_path):
    out = tmp_path / "nodes"
    agents = sigterm_after_two_steps(start_two_agents(out), out)
    said = "".join(stdout + stderr for _, stdout, stderr in agents)
    assert "pretraining convnext_atto" in said, said[-3000:]
    assert said.count("pretraining convnext_atto") == 1, "one rank in the world prints, not one per node"
    stopped = [line for line in said.splitlines() if line.startswith("stopped by SIGTERM")]
    assert len(stopped) == 1, said[-3000:]  # torchrun passed the signal on; the ranks agreed on one step

    nodes = load_checkpoint(out / "checkpoint.pt")
    steps = nodes["global_step"]
    assert 2 <= steps < STEPS, f"the SIGTERM landed after step {steps} of {STEPS}"
    assert stopped[0].startswith(f"stopped by SIGTERM after step {steps}; saved {out}/checkpoint.pt")
    assert logged_steps(out) == steps

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each agent's rank runs (OMP_NUM_THREADS=1); two threads contend on a shared CPU
    try:
        start = Pretrainer(PretrainConfig(**SETTINGS, out=str(tmp_path / "init"))).model.state_dict()
        Pretrainer(PretrainConfig(**SETTINGS, max_steps_per_epoch=steps, out=str(tmp_path / "single"))).run()
    finally:
        torch.set_num_threads(threads)
    assert load_checkpoint(tmp_path / "single/checkpoint.pt")["global_step"] == steps
    assert_trained_alike(out, tmp_path / "single", start, steps)
