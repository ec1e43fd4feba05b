"""Whether a process of this host still runs, on every platform: what a lock, a claim or a temporary file left by a
killed process is judged by, and the scheduler job it belonged to: what a lock left on another host is judged by."""

import os
import sys

SYNCHRONIZE = 0x00100000  # the right to wait on a process: its handle is signalled once it has exited
WAIT_TIMEOUT = 0x102  # a wait of 0 ms on a process that still runs
ERROR_ACCESS_DENIED = 5  # OpenProcess of another user's live process
# a requeued SLURM job (an elastic restart of a torchrun run) keeps its id and counts up its restarts
JOB_IDS = ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
JOB_RESTARTS = ("SLURM_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host. Not `os.kill(pid, 0)` on Windows, where signal 0 is CTRL_C_EVENT:
    it would interrupt a process group on the console, or fail with WinError 87, rather than look the pid up."""
    if pid <= 0:  # not a process: kill(0) and kill(-1) reach process groups
        return False
    if sys.platform == "win32":
        return windows_process_alive(pid)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def windows_process_alive(pid: int) -> bool:
    """Open the process and wait 0 ms on it: it runs while the wait times out (not its exit code, STILL_ACTIVE,
    which a process that exited with 259 would also read)."""
    import _winapi

    try:
        handle = _winapi.OpenProcess(SYNCHRONIZE, False, pid)
    except OverflowError:
        return False
    except OSError as err:  # no such process: ERROR_INVALID_PARAMETER
        return getattr(err, "winerror", None) == ERROR_ACCESS_DENIED
    try:
        return _winapi.WaitForSingleObject(handle, 0) == WAIT_TIMEOUT
    finally:
        _winapi.CloseHandle(handle)


def scheduler_job() -> dict[str, str]:
    """The SLURM job and torchrun run this process belongs to, and their restart counts (empty outside both)."""
    # torchrun's run id is "none" unless --rdzv-id (or --standalone) names it: unrelated runs would share it
    return {name: os.environ[name] for name in JOB_IDS + JOB_RESTARTS if os.environ.get(name, "none") != "none"}


def earlier_start_of_this_job(held, mine: dict) -> bool:
    """Whether a lock's job (`held`) is this process's, started fewer times: that start has ended. A lock of the same
    start (another task of this job) or of another job is kept. A SLURM job is its id alone (`--standalone` redraws
    torchrun's run id at every start)."""
    if not isinstance(held, dict) or not any(name in mine for name in JOB_IDS):
        return False
    slurm = JOB_IDS[0]
    if slurm in mine and held.get(slurm) == mine[slurm] and restarts(held)[0] < restarts(mine)[0]:
        return True
    return all(held.get(name) == mine.get(name) for name in JOB_IDS) and restarts(held) < restarts(mine)


def restarts(job: dict) -> tuple[int, ...]:
    """How often the SLURM job, then the torchrun run within it, has restarted (an unreadable count: very often)."""
    return tuple(int(n) if (n := str(job.get(name, 0))).isdigit() else sys.maxsize for name in JOB_RESTARTS)
