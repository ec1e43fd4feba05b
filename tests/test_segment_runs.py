"""A segmentation run's folder: SIGTERM keeps the last epoch's segmenter.pt, --resume then equals an uninterrupted
run (the CLI says how to continue), a resume that would change the run is refused, and `--data generated` leaves
nothing outside OUT."""

import json

import pytest
import torch
from cli_runs import one_torch_thread  # noqa: F401 (autouse)
from click.testing import CliRunner
from stop_runs import sigterm_at_step

from pretexts.cli import main
from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.evaluation.segmentation.train import Segmentation
from pretexts.errors import CheckpointError

QUIET = dict(echo=lambda line: None)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(write_generated(tmp_path_factory.mktemp("seg") / "d", 12, 4, 32))


def config(data, out, **extra) -> SegmentConfig:
    common = dict(data=data, backbone="test_resnet", img_size=32, head="linear", batch_size=4, epochs=2, lr=1e-3)
    return SegmentConfig(**{**common, "out": str(out), **extra})


def test_a_stopped_segmentation_resumes_to_the_same_weights(data, tmp_path):
    straight = Segmentation(config(data, tmp_path / "straight"), **QUIET)
    expected = straight.run()

    stopped = Segmentation(config(data, tmp_path / "stopped"), **QUIET)
    sigterm_at_step(stopped, 4, loss="loss_of")  # the second step of epoch 2 (3 steps an epoch)
    results = stopped.run()
    assert results["interrupted"] == "SIGTERM" and results["exit_code"] == 143 and results["epochs"] == 1
    assert torch.load(tmp_path / "stopped" / "segmenter.pt", weights_only=False)["epoch"] == 1

    resumed = Segmentation(config(data, tmp_path / "stopped", resume="auto"), **QUIET)
    got = resumed.run()
    assert got["epoch"] == 2 and got["steps"] == expected["steps"] == 6
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    assert got["miou_percent"] == pytest.approx(expected["miou_percent"])
    log = [json.loads(line)["epoch"] for line in (tmp_path / "stopped" / "log.jsonl").read_text().splitlines()]
    assert log == [1, 2]


def test_a_resume_that_would_change_the_run_is_refused(data, tmp_path):
    Segmentation(config(data, tmp_path / "r", epochs=1), **QUIET).run()
    with pytest.raises(CheckpointError, match="lr"):
        Segmentation(config(data, tmp_path / "r", epochs=2, resume="auto", lr=5e-4), **QUIET).run()
    longer = Segmentation(config(data, tmp_path / "r", epochs=2, resume="auto"), **QUIET).run()
    assert longer["epoch"] == 2 and longer["steps"] == 6


def test_the_cli_resumes_a_run_in_out_and_generated_data_stays_out_of_it(tmp_path):
    out = tmp_path / "seg"
    options = ["segment", "--data", "generated", "--from-scratch", "--backbone", "test_resnet", "--img-size", "32"]
    options += ["--head", "linear", "--batch-size", "16", "--max-steps", "4", "--out", str(out)]
    first = CliRunner().invoke(main, options)
    assert first.exit_code == 0, first.output
    assert not (out / "generated-data").exists()
    assert json.loads((out / "config.json").read_text())["data"] == "generated"
    again = CliRunner().invoke(main, options)
    assert again.exit_code != 0 and "--resume" in again.output  # a finished run is not written over
    resumed = CliRunner().invoke(main, [*options[:-4], "--max-steps", "8", "--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads((out / "results.json").read_text())["steps"] == 8
