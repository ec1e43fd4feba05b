"""Pretraining's per-step loss history goes into each checkpoint as two tensors (hashed and saved as bytes, not a repr
per number) and comes back from a resume as the same (step, loss) pairs, bit for bit."""

from pathlib import Path

import pytest
import torch
from test_resume import KilledAfterFirstEpoch, config

from pretexts.engine import Pretrainer, load_checkpoint
from pretexts.engine.training import loop


def test_the_step_history_is_saved_as_tensors_and_a_resume_keeps_it_bit_for_bit(tmp_path, monkeypatch):
    curves = {}
    monkeypatch.setattr(loop, "loss_curve", lambda steps, losses, path, *_: curves.update({Path(path).parent: losses}))
    straight = Pretrainer(config(tmp_path / "straight", 2))
    straight.run()
    with pytest.raises(KeyboardInterrupt):
        KilledAfterFirstEpoch(config(tmp_path / "split", 2)).run()
    resumed = Pretrainer(config(tmp_path / "split", 2, resume="auto"))
    resumed.run()
    assert [step for step, _ in straight.history] == [1, 2, 3, 4]
    assert all(type(step) is int and type(loss) is float for step, loss in resumed.history)
    assert resumed.history == straight.history  # the same floats: the resume is exact
    assert curves[tmp_path / "split"] == curves[tmp_path / "straight"] == [loss for _, loss in straight.history]
    saved = load_checkpoint(tmp_path / "split" / "checkpoint.pt")["history"]
    assert saved["step"].dtype == torch.int64 and saved["loss"].dtype == torch.float64
    assert list(zip(saved["step"].tolist(), saved["loss"].tolist())) == straight.history
