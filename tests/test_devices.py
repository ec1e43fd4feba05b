"""`--device`: a device this machine lacks (any type torch parses, not only CUDA) or 'meta' is refused in one line
naming the devices there are, before anything is built on it."""

import pytest
import torch
from cli_runs import ONE_STEP, fails_cleanly, one_torch_thread  # noqa: F401 (autouse)

from pretexts.engine.training import preflight
from pretexts.engine.training.preflight import machine_devices, resolve_device, type_available
from pretexts.errors import ParameterError

MISSING = [kind for kind in ("mps", "xpu", "hpu", "mtia", "xla") if not type_available(kind)]


@pytest.mark.parametrize("kind", MISSING)
def test_a_device_type_this_machine_lacks_is_refused(kind):
    with pytest.raises(ParameterError, match=f"device '{kind}' asked, but this machine has no {kind} device"):
        resolve_device(kind)
    with pytest.raises(ParameterError, match="use --device cpu"):
        resolve_device(f"{kind}:0")


def test_meta_is_refused():
    with pytest.raises(ParameterError, match="device 'meta' holds no data.*use --device cpu"):
        resolve_device("meta")


@pytest.mark.skipif(type_available("mps"), reason="needs a machine without an Apple GPU")
def test_train_on_a_missing_device_is_one_line(tmp_path):
    """It was a traceback from Module.to: 'PyTorch is not linked with support for mps devices'."""
    fails_cleanly([*ONE_STEP, "--out", tmp_path / "run", "--device", "mps"], "no mps device", "use --device cpu")
    fails_cleanly([*ONE_STEP, "--out", tmp_path / "run", "--device", "meta"], "device 'meta' holds no data")
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_an_accelerator_that_is_here_is_taken_and_its_index_checked(monkeypatch):
    monkeypatch.setattr(torch.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.mps, "device_count", lambda: 2)
    assert resolve_device("mps:1") == torch.device("mps", 1)
    with pytest.raises(ParameterError, match=r"there are 2 mps devices \(mps:0 to mps:1\)"):
        resolve_device("mps:2")


def test_the_refusal_names_the_accelerator_there_is(monkeypatch):
    """The devices named come from torch (torch.accelerator), not a list of our own."""
    if not hasattr(torch, "accelerator"):
        pytest.skip("torch.accelerator is torch 2.6's")
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *args, **kwargs: torch.device("xpu"))
    monkeypatch.setattr(preflight, "type_available", lambda kind: kind in ("cpu", "xpu"))
    assert machine_devices() == ["cpu", "xpu"]
    with pytest.raises(ParameterError, match="no hpu device; use --device cpu or xpu"):
        resolve_device("hpu")
