"""A probe that raises (a plugin's bug) costs only its own result: the others' finished results are written, the
failing one is marked failed with why, and the command says so in one line and exits non-zero."""

import json
import traceback

import pytest
from click.testing import CliRunner
from plugin_installs import plugin_installer
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts.cli import main
from pretexts.registry import PROBES

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

RAISING = """
    from pretexts.engine.evaluation.probe import register_probe


    @register_probe("raising-probe", {})
    def raising_probe(train, val, num_classes, cfg):
        '''A probe that raises.'''
        raise ValueError("deliberate failure")
"""


@pytest.fixture
def raising_probe(tmp_path):
    with plugin_installer(tmp_path, PROBES, "pretexts.probes") as install:
        install("pretexts_raising", RAISING, "raising-probe = pretexts_raising:raising_probe")
        PROBES.load(force=True)
        yield


@pytest.mark.parametrize("debug", [False, True], ids=["one-line", "debug"])
def test_a_failing_probe_keeps_the_others_results(raising_probe, tmp_path, debug):
    out = tmp_path / "probe"
    args = ["probe", "--checkpoint", write_checkpoint(tmp_path / "ckpt.pt")[0], "--probe", "linear"]
    args += ["--probe", "raising-probe", "--probe", "knn", "--epochs", "1", "--workers", "0", "--out", out]
    result = CliRunner().invoke(main, ["--debug"] * debug + [str(a) for a in args])
    assert result.exit_code != 0
    results = json.loads((out / "results.json").read_text())
    assert 0 <= results["linear"]["top1"] <= 100 and "k=20" in results["knn"]  # the probes before and after it
    assert results["raising-probe"] == {"failed": "ValueError: deliberate failure"}
    if debug:  # the traceback reaches the probe's own line
        assert 'raise ValueError("deliberate failure")' in "".join(traceback.format_exception(result.exception))
        return
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "raising-probe probe failed: ValueError: deliberate failure" in result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert "probe raising-probe failed" in error and str(out / "results.json") in error and "--debug" in error
