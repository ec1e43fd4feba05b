"""How many CPU threads a run's torch ops use. The environment's OMP_NUM_THREADS wins where it is set (torch reads
it). Otherwise no more than the CPUs this process may run on (its affinity: taskset, a container's or a SLURM job's
CPU set, which torch's own default, the machine's cores, can exceed), less those other processes keep busy when the
run starts: an OpenMP thread that shares its core with another process holds up every parallel region, and the step
took 3-4x longer than one thread would (docs/performance.md, "A CPU shared with other work")."""

import os
import re
import statistics
import time
from pathlib import Path

import torch

STAT = Path("/proc/stat")  # Linux's running-task count: procs_running


def busy_cpus(reads: int = 5, interval: float = 0.02) -> int:
    """CPUs that other processes keep running now: the kernel's count of running tasks (/proc/stat's
    procs_running, the median of a few reads) less this process; 0 where there is no /proc."""
    counts = []
    for _ in range(reads):
        try:
            found = re.search(r"^procs_running (\d+)$", STAT.read_text(), re.M)
        except OSError:
            return 0
        if found is None:
            return 0
        counts.append(int(found[1]))
        time.sleep(interval)
    return max(0, round(statistics.median(counts)) - 1)


def use_available_cpus() -> int:
    """Sets torch's threads to the CPUs this process may use that no other process keeps busy (at least one),
    unless OMP_NUM_THREADS says how many; returns the count. The commands call it once as they start (a Python
    caller keeps its own `torch.set_num_threads`)."""
    if "OMP_NUM_THREADS" not in os.environ and hasattr(os, "sched_getaffinity"):
        allowed = len(os.sched_getaffinity(0))
        torch.set_num_threads(max(1, min(torch.get_num_threads(), allowed - busy_cpus())))
    return torch.get_num_threads()


def threads_note(device: torch.device, threads: int) -> str:
    """' (N CPU threads)' for a start line on the CPU; nothing on an accelerator."""
    return f" ({threads} CPU thread{'s' if threads > 1 else ''})" if device.type == "cpu" else ""
