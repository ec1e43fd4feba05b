"""`--save-every N`: the checkpoint is also written every N optimiser steps inside an epoch, so a run killed with no
warning (no SIGTERM to save on) resumes from the last of them, to the weights of a run that was never stopped."""

import dataclasses
import json

import torch
from cli_runs import TRAIN, run_cli
from test_resume import config, weights

from pretexts.engine import Pretrainer, load_checkpoint


class KilledAtStep(Pretrainer):
    """Dies as optimiser step 8 starts, saving nothing (as a SIGKILL would)."""

    def train_step(self, images):
        if self.global_step + 1 == 8:
            raise KeyboardInterrupt
        return super().train_step(images)


def test_a_killed_run_resumes_from_its_last_periodic_checkpoint_to_the_same_weights(tmp_path):
    def run(name: str, **extra):  # 2 epochs of 4 steps, a checkpoint every 3 steps and at each epoch's end
        return dataclasses.replace(config(tmp_path / name, 2, save_every=3, **extra), max_steps_per_epoch=4)

    Pretrainer(run("straight")).run()
    try:
        KilledAtStep(run("killed")).run()
    except KeyboardInterrupt:
        pass
    saved = load_checkpoint(tmp_path / "killed" / "checkpoint.pt")
    assert (saved["global_step"], saved["epoch"], saved["batch"]) == (6, 1, 2)  # not step 4, the epoch's end
    Pretrainer(run("killed", resume="auto")).run()
    a, b = weights(tmp_path / "straight" / "checkpoint.pt"), weights(tmp_path / "killed" / "checkpoint.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    steps = [json.loads(line)["step"] for line in (tmp_path / "killed" / "log.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))  # step 7, logged before the kill, is logged once


def test_the_option_is_recorded_and_a_resume_may_change_it(tmp_path):
    out = tmp_path / "run"
    run = [*TRAIN, "--max-steps-per-epoch", "2", "--workers", "0", "--out", out]
    assert run_cli([*run, "--epochs", "1", "--save-every", "1"])[0].exit_code == 0
    assert json.loads((out / "config.json").read_text())["save_every"] == 1
    result, error = run_cli([*run, "--epochs", "2", "--save-every", "5", "--resume"])
    assert result.exit_code == 0, error
    assert json.loads((out / "config.json").read_text())["save_every"] == 5
