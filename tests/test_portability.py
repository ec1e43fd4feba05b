"""What differs between machines: an optional extra not installed (`pretexts shard` without webdataset), Windows'
process checks (signal 0 is Ctrl-C there), a locale that is not UTF-8 reading a config file, and an sdist whose
tests run without the repository."""

import os
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest
from cli_runs import fails_cleanly

from pretexts.engine.compare import cells
from pretexts.engine.training.processes import process_alive

ROOT = Path(__file__).resolve().parents[1]


# ---- pretexts shard without the wds extra ------------------------------------------------------------------------
def test_shard_without_webdataset_says_how_to_install_it(tmp_path, monkeypatch):
    """It was a ModuleNotFoundError traceback from shard_writer's import."""
    monkeypatch.setitem(sys.modules, "webdataset", None)  # `import webdataset` now fails as if not installed
    monkeypatch.delitem(sys.modules, "pretexts.engine.data.shard_writer", raising=False)  # imported again
    fails_cleanly(
        ["shard", "sample", tmp_path / "shards"], "writing shards needs webdataset", 'pip install "pretexts[wds]"'
    )
    assert not (tmp_path / "shards").exists()


# ---- whether a process lives ---------------------------------------------------------------------------------------
def ended_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid names no process
    return child.pid


def test_process_alive_on_this_platform():
    assert process_alive(os.getpid())
    assert not process_alive(ended_pid())
    assert not process_alive(0) and not process_alive(-1)  # process groups, not processes


def windows_error(winerror: int) -> OSError:
    error = OSError(f"[WinError {winerror}]")
    error.winerror = winerror  # set by Windows alone
    return error


class FakeWinapi(types.SimpleNamespace):
    """`_winapi` with processes by pid: None while it runs, its exit code once it has exited, or the OSError
    OpenProcess raises for it."""

    def __init__(self, processes: dict):
        super().__init__(processes=processes, closed=[])

    def OpenProcess(self, access, inherit, pid):  # noqa: N802 (the Windows API's name)
        found = self.processes.get(pid, windows_error(87))  # ERROR_INVALID_PARAMETER: no such process
        if isinstance(found, OSError):
            raise found
        return ("handle", pid)

    def WaitForSingleObject(self, handle, milliseconds):  # noqa: N802
        return 0x102 if self.processes[handle[1]] is None else 0  # WAIT_TIMEOUT while it runs, else WAIT_OBJECT_0

    def CloseHandle(self, handle):  # noqa: N802
        self.closed.append(handle)


@pytest.fixture
def windows(monkeypatch):
    """sys.platform 'win32', a fake `_winapi`, and os.kill refusing signal 0, which on Windows is CTRL_C_EVENT."""
    winapi = FakeWinapi({100: None, 101: 0, 102: windows_error(5), 104: 259})
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setitem(sys.modules, "_winapi", winapi)

    def kill(pid, sig):
        raise AssertionError(f"os.kill({pid}, {sig}) on Windows sends Ctrl-C")

    monkeypatch.setattr(os, "kill", kill)
    return winapi


def test_on_windows_a_process_is_opened_not_signalled(windows):
    assert process_alive(100)  # running
    assert not process_alive(101)  # ended, its handle still held somewhere
    assert process_alive(102)  # another user's: it exists
    assert not process_alive(103)  # no such process
    assert not process_alive(104)  # exited with code 259, which reads as STILL_ACTIVE
    assert windows.closed == [("handle", 100), ("handle", 101), ("handle", 104)]


def test_a_compare_cell_claim_uses_the_same_check(tmp_path, windows):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "claim").write_text("100")
    assert not cells.claim(tmp_path / "busy")  # a live process has it
    (tmp_path / "left").mkdir()
    (tmp_path / "left" / "claim").write_text("101")
    assert cells.claim(tmp_path / "left")  # left by an ended one: taken
    assert (tmp_path / "left" / "claim").read_text() == str(os.getpid())
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "claim").write_text(str(os.getpid()))  # a killed run's, whose pid this process now has
    assert cells.claim(tmp_path / "mine")


def test_a_claim_of_another_users_live_process_holds(tmp_path, monkeypatch):
    """os.kill's PermissionError (a process of another user) escaped `claim` as a traceback."""

    def kill(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", kill)
    (tmp_path / "claim").write_text("4242")
    assert not cells.claim(tmp_path)


def test_a_run_lock_left_on_windows_is_judged_by_the_same_check(tmp_path, windows):
    from pretexts.engine.training.run_folder import RunLock

    lock = RunLock(tmp_path, "train")
    assert not lock.stale({"pid": 100, "host": socket.gethostname()})  # its process runs: the lock holds
    assert lock.stale({"pid": 101, "host": socket.gethostname()})  # it ended: the lock is taken over


# ---- config files are UTF-8 ----------------------------------------------------------------------------------------
def read_config_in_c_locale(path: Path) -> subprocess.CompletedProcess:
    """read_config_file(path) in a process whose locale is C (ASCII), as on a bare container; Windows' cp1252 read
    the same bytes as mojibake."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    code = "import sys; from pretexts.cli import config_reader as r; print(ascii(r.read_config_file(sys.argv[1])))"
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "suffix, text", [(".yaml", "data: ../my data \u00e9\n"), (".json", '{"data": "../my data \u00e9"}')]
)
def test_a_config_file_is_read_as_utf8_whatever_the_locale(tmp_path, suffix, text):
    path = tmp_path / f"run{suffix}"
    path.write_bytes(text.encode("utf-8"))
    done = read_config_in_c_locale(path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ascii({"data": "../my data \u00e9"})
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))  # with the BOM some Windows editors write
    assert read_config_in_c_locale(path).stdout.strip() == ascii({"data": "../my data \u00e9"})


def test_a_config_file_that_is_not_utf8_is_refused_in_one_line(tmp_path):
    (tmp_path / "run.yaml").write_bytes("data: caf\u00e9\n".encode("latin-1"))
    fails_cleanly(["train", "--config", tmp_path / "run.yaml"], "is not UTF-8 text", "save it as UTF-8")


# ---- the sdist -----------------------------------------------------------------------------------------------------
# what a source distribution leaves out: CI's script and git's and pre-commit's settings (setuptools adds the
# packages and pyproject.toml itself, MANIFEST.in the rest)
LEFT_OUT = (".ci/", ".gitignore", ".pre-commit-config.yaml")
PACKAGED = ("pretexts/", "engine/", "backbones/", "pyproject.toml", "MANIFEST.in")  # setuptools adds these


def test_the_manifest_puts_every_tracked_file_in_the_sdist(monkeypatch):
    """Without MANIFEST.in the sdist held tests/test_*.py but not conftest.py or the helpers they import, nor docs/:
    no test could be collected from it."""
    if not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (an unpacked sdist has none)")
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    from setuptools.command.egg_info import FileList

    monkeypatch.chdir(ROOT)  # MANIFEST.in's paths are the repository's
    manifest = FileList()
    for line in (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            manifest.process_template_line(line)
    shipped = set(manifest.files)
    missing = [
        path for path in listed.stdout.splitlines() if path not in shipped and not path.startswith(LEFT_OUT + PACKAGED)
    ]
    assert not missing, f"tracked but not in the sdist: {missing[:10]}; add them to MANIFEST.in (or to LEFT_OUT)"
    assert {"tests/conftest.py", "tests/cli_runs.py", "docs/index.md", "CHANGELOG.md"} <= shipped
