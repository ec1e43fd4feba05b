"""Kills and resumes for benchmarks/reliability.py: `pretexts train` SIGKILLed or SIGTERMed at a random moment, then
`--resume` until done, compared bit for bit with an uninterrupted run of the same command."""

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from reliability_harness import ENV, TRAIN

from pretexts.engine.training.checkpoint import load_checkpoint

RUN = [
    sys.executable,
    "-m",
    "pretexts",
    *TRAIN,
    "--epochs",
    "4",
    "--max-steps-per-epoch",
    "3",
    "--eval-images",
    "4",
    "--figure-images",
    "2",
    "--seed",
    "1",
]


def weights(path: Path) -> dict:
    return load_checkpoint(path)["model"]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def interrupted_then_resumed(out: Path, sig: int, delay: float, reference: dict) -> tuple[bool, bool]:
    """(the run finished after --resume, its weights equal the reference)."""
    run = subprocess.Popen([*RUN, "--out", out], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    run.send_signal(sig)
    run.wait()
    for _ in range(3):  # a kill before the first checkpoint leaves nothing to resume: start again
        resume = ["--resume"] if (out / "checkpoint.pt").exists() else ["--force"]
        done = subprocess.run([*RUN, "--out", out, *resume], env=ENV, capture_output=True, text=True)
        if done.returncode == 0:
            return True, same(weights(out / "checkpoint.pt"), reference)
    return False, False


def kills_and_resumes(work: Path, kills: int, resumes: int, seed: int) -> tuple[list, list]:
    rng = random.Random(seed)
    started = time.time()
    subprocess.run([*RUN, "--out", work / "reference"], env=ENV, check=True, capture_output=True)
    duration = time.time() - started
    reference = weights(work / "reference" / "checkpoint.pt")
    killed = [
        interrupted_then_resumed(work / f"kill{i}", signal.SIGKILL, rng.uniform(0.3, 1.0) * duration, reference)
        for i in range(kills)
    ]
    stopped = [
        interrupted_then_resumed(work / f"term{i}", signal.SIGTERM, rng.uniform(0.4, 0.95) * duration, reference)
        for i in range(resumes)
    ]
    return killed, stopped
