"""A signal to the whole process group (Ctrl-C, a scheduler's SIGTERM) must not kill a loader worker that has not
yet set itself to ignore it: the workers start with SIGINT and SIGTERM held, and the main thread gets them after."""

import os
import signal
import threading
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset

from pretexts.engine.data.loader import batches, make_loader, stop_signals_held

STATUS = Path("/proc/self/status")
pytestmark = pytest.mark.skipif(not STATUS.exists(), reason="reads a process's signal masks from /proc")


def held(field: str) -> set[int]:
    """The signals of /proc/self/status's SigBlk (held back) or SigIgn (ignored) line."""
    line = next(line for line in STATUS.read_text().splitlines() if line.startswith(field + ":"))
    mask = int(line.split()[1], 16)
    return {number for number in range(1, 65) if mask >> (number - 1) & 1}


class WorkerMasks(Dataset):
    """Each item: whether the worker that loads it holds SIGTERM and SIGINT back, and ignores them."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        blocked, ignored = held("SigBlk"), held("SigIgn")
        stop = {signal.SIGTERM, signal.SIGINT}
        return torch.tensor([stop <= blocked, stop <= ignored]), os.getpid()


def test_workers_start_with_the_stop_signals_held_and_the_main_thread_gets_them_back():
    before = held("SigBlk")
    with batches(make_loader(WorkerMasks(), 2, workers=2, drop_last=False)) as loader:
        items = list(loader)
    masks = torch.cat([item[0] for item in items])
    assert masks.all(), masks  # every worker: held from its start, then ignored by ignore_stop_signals
    assert {pid for item in items for pid in item[1].tolist()} - {os.getpid()}  # they ran in workers
    assert held("SigBlk") == before  # the main thread's mask is as it was


def test_a_stop_signal_that_arrives_while_workers_start_is_delivered_after_not_lost():
    caught = []
    previous = signal.signal(signal.SIGTERM, lambda *args: caught.append("term"))
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})  # a signal the caller holds itself
        with stop_signals_held():
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread: others may take a process's
            assert not caught  # held back while the workers start
        assert caught == ["term"]  # and delivered after
        assert signal.SIGUSR1 in held("SigBlk")  # the caller's mask is restored, not cleared
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        signal.signal(signal.SIGTERM, previous)
