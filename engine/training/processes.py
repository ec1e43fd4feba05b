"""Whether a process of this host still runs, on every platform: what a lock, a claim or a temporary file left by a
killed process is judged by."""

import os
import sys

SYNCHRONIZE = 0x00100000  # the right to wait on a process: its handle is signalled once it has exited
WAIT_TIMEOUT = 0x102  # a wait of 0 ms on a process that still runs
ERROR_ACCESS_DENIED = 5  # OpenProcess of another user's live process


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
