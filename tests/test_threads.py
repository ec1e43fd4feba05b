"""A command's CPU threads: OMP_NUM_THREADS where the environment sets it, else the CPUs the process may use less
those other processes keep running as it starts (at least one); the start line says how many."""

import os

import pytest
import torch

from pretexts.engine.training import threads


@pytest.fixture
def torch_threads(monkeypatch):
    """Torch's thread count restored after the test; OMP_NUM_THREADS (set by the test session) removed for it."""
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(max(2, before))
    yield
    torch.set_num_threads(before)


def running(monkeypatch, tmp_path, count: int) -> None:
    stat = tmp_path / "stat"
    stat.write_text(f"cpu  1 2 3\nprocs_running {count}\nprocs_blocked 0\n")
    monkeypatch.setattr(threads, "STAT", stat)


def test_other_running_processes_take_cpus_from_the_run(monkeypatch, tmp_path, torch_threads):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    running(monkeypatch, tmp_path, 2)  # this process and one other
    assert threads.busy_cpus(reads=3, interval=0) == 1
    assert threads.use_available_cpus() == 1 == torch.get_num_threads()


def test_a_quiet_machine_keeps_every_allowed_cpu_and_a_busy_one_keeps_one(monkeypatch, tmp_path, torch_threads):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    running(monkeypatch, tmp_path, 1)  # this process alone
    assert threads.use_available_cpus() == 2
    running(monkeypatch, tmp_path, 9)
    assert threads.use_available_cpus() == 1


def test_the_affinity_caps_the_threads(monkeypatch, tmp_path, torch_threads):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})  # taskset -c 3, a SLURM job's one CPU
    running(monkeypatch, tmp_path, 1)
    assert threads.use_available_cpus() == 1


def test_omp_num_threads_wins(monkeypatch, tmp_path, torch_threads):
    running(monkeypatch, tmp_path, 50)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    assert threads.use_available_cpus() == 2


def test_no_proc_means_no_busy_cpus(monkeypatch, tmp_path):
    monkeypatch.setattr(threads, "STAT", tmp_path / "missing")
    assert threads.busy_cpus(reads=2, interval=0) == 0


def test_the_start_line_names_the_threads_on_a_cpu_only():
    assert threads.threads_note(torch.device("cpu"), 1) == " (1 CPU thread)"
    assert threads.threads_note(torch.device("cpu"), 2) == " (2 CPU threads)"
    assert threads.threads_note(torch.device("meta"), 2) == ""
