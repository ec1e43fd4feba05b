"""The representation study: a study killed by a signal takes its running cells with it (Linux), so `timeout` or
a scheduler's SIGTERM ends the whole study, not only the process that prints its table."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

STUDY_DIR = Path(__file__).resolve().parents[1] / "studies" / "representation"

# the study's own pool, with a cell that writes its pid and sleeps for a minute
STUDY = """
import sys, time
from representation import cell_pool

def cell(path):
    import os
    open(path, "w").write(str(os.getpid()))
    time.sleep(60)

if __name__ == "__main__":
    pool = cell_pool(1)
    pool.submit(cell, sys.argv[1])
    time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too: its parent, the study, is gone and init reaps it
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][0] != "Z"


def wait_for(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_study_ends_its_running_cells(tmp_path):
    script, pid_file = tmp_path / "study.py", tmp_path / "cell.pid"
    script.write_text(STUDY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(STUDY_DIR), os.environ.get("PYTHONPATH", "")])}
    study = subprocess.Popen([sys.executable, str(script), str(pid_file)], env=env)
    try:
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text(), 120), "the cell never started"
        cell = int(pid_file.read_text())
        assert alive(cell)
        study.kill()  # SIGKILL: no handler of the study's runs, as with a scheduler's hard kill
        study.wait()
        assert wait_for(lambda: not alive(cell), 20), "the cell outlived its study"
    finally:
        study.kill()
        if pid_file.exists() and pid_file.read_text() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), 9)
