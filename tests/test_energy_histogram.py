"""Energy histograms: scores of real, corrupted and restored states, the figure and its numbers."""

import json

import pytest
import torch
from click.testing import CliRunner
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

import pretexts
from pretexts.cli import main
from pretexts.engine.evaluation.energy_histogram import energy_scores, summarise

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("energy") / "ckpt.pt")


def test_scores_cover_every_group_are_seeded_and_each_step_goes_down_the_energy(checkpoint, held_out_images):
    _, model = checkpoint
    task = pretexts.create_pretext("colorization")
    scores = energy_scores(model, task, [held_out_images[:16]], steps=2, device=torch.device("cpu"), seed=0)
    assert list(scores) == ["real", "corrupted", "step 1", "step 2"]
    assert all(v.shape == (16,) and torch.isfinite(v).all() for v in scores.values())
    again = energy_scores(model, task, [held_out_images[:16]], steps=2, device=torch.device("cpu"), seed=0)
    for name in scores:
        torch.testing.assert_close(scores[name], again[name])
    # a gradient step of a small size lowers the energy it descends
    assert scores["step 1"].mean() < scores["corrupted"].mean() and scores["step 2"].mean() < scores["step 1"].mean()
    summary = summarise(scores)
    assert summary["images"] == 16 and 0 <= summary["real_below_corrupted"] <= 1
    assert summary["step 2"]["mean"] == pytest.approx(scores["step 2"].mean().item())


def test_one_held_out_image_is_refused_rather_than_summarised_as_nan(checkpoint, held_out_images):
    _, model = checkpoint
    task = pretexts.create_pretext("colorization")
    with pytest.raises(
        pretexts.errors.DataError, match="the data gave 1 held-out image and the histogram needs at least 2"
    ):
        energy_scores(model, task, [held_out_images[:1]], steps=2, device=torch.device("cpu"))


def test_cli_energy_writes_the_figure_and_its_numbers(checkpoint, tmp_path):
    path, _ = checkpoint
    out = tmp_path / "energy.png"
    result = CliRunner().invoke(
        main,
        [
            "energy",
            "--checkpoint",
            str(path),
            "--data",
            "sample",
            "--task",
            "super-resolution",
            "--task-arg",
            "scale=4",
            "--images",
            "24",
            "--workers",
            "0",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0 and "super-resolution on 24 images" in result.output
    results = json.loads(out.with_suffix(".json").read_text())
    assert results["task"] == "super-resolution" and results["task_args"] == {"scale": 4} and results["steps"] == 2
    assert {"real", "corrupted", "step 1", "step 2"} <= set(results)


@pytest.mark.parametrize("command", ["energy", "restore"])
def test_cli_refuses_an_autoencoder_checkpoint_in_one_line(tmp_path, command):
    path, _ = write_checkpoint(tmp_path / "ae.pt", method="ae")
    result = CliRunner().invoke(main, [command, "--checkpoint", str(path), "--out", str(tmp_path / "e.png")])
    assert result.exit_code == 2 and "holds no energy model" in result.output and "--method energy" in result.output
    assert len(result.output.strip().splitlines()) == 1
