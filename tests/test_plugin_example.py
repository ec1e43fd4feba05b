"""The example third-party task (examples/plugin) installs, registers by entry point and trains."""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_runs import tiny_image_folder
from click.testing import CliRunner
from pretext_images import cifar_batch, tiny_vit

from pretexts import create_pretext, list_pretexts, registry
from pretexts.cli import main
from pretexts.engine.methods.energy.restore import restoration_loss, restore
from pretexts.engine.methods.states import state_adapter

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "plugin"


@pytest.fixture
def installed_plugin(tmp_path):
    """pip-install the example into a temporary target dir (offline, no deps) and put it on sys.path."""
    source, target = tmp_path / "src", tmp_path / "site"
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    try:
        registry.load_plugins(force=True)
        yield target
    finally:
        sys.path.remove(str(target))
        sys.modules.pop("pretexts_jpeg", None)
        registry.TASKS.table.pop("jpeg", None)
        registry.TASKS.broken.pop("jpeg", None)
        importlib.invalidate_caches()
        registry.load_plugins(force=True)


def test_the_plugin_registers_and_trains(installed_plugin):
    assert "jpeg" in list_pretexts() and "jpeg" not in registry.broken_plugins()
    model = tiny_vit().train()
    model.zero_grad()
    task = state_adapter(create_pretext("jpeg", quality_low=10, quality_high=30), model).prepare()
    images = cifar_batch(4)
    sample = task(images, torch.Generator().manual_seed(0))
    assert sample.state.shape == images.shape and not torch.allclose(sample.state, images)
    assert ((sample.info["quality"] >= 10) & (sample.info["quality"] <= 30)).all()
    restoration_loss(restore(model, task, sample, steps=2), sample.target).backward()
    assert model.backbone.patch_embed.proj.weight.grad.abs().sum() > 0


def test_pretexts_list_and_train_see_the_plugin(installed_plugin, tmp_path):
    """A fresh `pretexts` process finds the plugin through its entry point alone."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed_plugin), os.environ.get("PYTHONPATH", "")])}
    listed = subprocess.run(
        [sys.executable, "-m", "pretexts", "list", "-v", "jp*"], capture_output=True, text=True, env=env
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("jpeg") and "quality_low" in listed.stdout and "BROKEN" not in listed.stdout
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        [
            "train",
            "--task",
            "jpeg",
            "--backbone",
            "test_convnext",
            "--batch-size",
            "8",
            "--epochs",
            "1",
            "--max-steps-per-epoch",
            "2",
            "--workers",
            "0",
            "--data",
            str(tiny_image_folder(tmp_path / "data")),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and json.loads((out / "config.json").read_text())["task"] == "jpeg"


def test_the_plugin_is_gone_after_cleanup():
    assert "jpeg" not in list_pretexts()
