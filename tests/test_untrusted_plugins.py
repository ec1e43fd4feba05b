"""Plugins come from installed distributions only: under `python -m pretexts` (and `torchrun -m pretexts`) the
working directory is on sys.path, and a `*.dist-info` folder lying there ran its entry point's code."""

import subprocess
import sys
import textwrap

from pretexts import plugins


def plant_plugin(folder, marker) -> None:
    """A crafted distribution in `folder`: entry points in every group, a module that leaves `marker` on import."""
    info = folder / "evil-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[pretexts.tasks]\nevil = evil_plugin:Task\n\n"
        "[pretexts.methods]\nevil-method = evil_plugin:Task\n\n"
        "[pretexts.probes]\nevil-probe = evil_plugin:Task\n"
    )
    (folder / "evil_plugin.py").write_text(
        textwrap.dedent(f"""
        open({str(marker)!r}, "w").write("imported")
        Task = None
        """)
    )


def test_a_dist_info_in_the_working_directory_is_not_loaded(tmp_path):
    cwd, marker = tmp_path / "downloads", tmp_path / "marker"
    plant_plugin(cwd, marker)
    listed = subprocess.run(
        [sys.executable, "-m", "pretexts", "list"], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    assert "colorization" in listed.stdout and "evil" not in listed.stdout + listed.stderr
    assert not marker.exists()


def test_the_working_directory_is_left_out_of_the_plugin_path(tmp_path, monkeypatch):
    """'' (python -c, the REPL) and the cwd's absolute path (python -m) both name it; other entries stay."""
    cwd, marker = tmp_path / "here", tmp_path / "marker"
    plant_plugin(cwd, marker)
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", ["", str(cwd), "."] + sys.path)
    assert str(cwd) not in plugins.installed_path() and "" not in plugins.installed_path()
    for group in ("pretexts.tasks", "pretexts.methods", "pretexts.probes"):
        assert not [ep for ep in plugins.plugin_entry_points(group) if ep.dist.name == "evil"]
    assert not marker.exists()
    monkeypatch.chdir(tmp_path)  # the same folder, installed on the path from elsewhere, is read
    assert [ep.name for ep in plugins.plugin_entry_points("pretexts.tasks") if ep.dist.name == "evil"] == ["evil"]
