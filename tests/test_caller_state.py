"""The Python API leaves the caller's process as it found it: after `pretrain`, `finetune`, `run_probe` and a
segmentation run, the global random generators (torch's, Python's `random`, numpy's) draw what they would have drawn
without the call, and the CUDA arithmetic flags a run sets (TF32, cuDNN's autotuning) are the caller's again. The
run itself still seeds itself: the same seed gives the same losses whatever state the caller's generators are in."""

import json
import random

import numpy as np
import pytest
import torch
from pretrained_checkpoints import SMALL_DATA, single_thread, write_checkpoint  # noqa: F401 (a fixture)

import pretexts
from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.evaluation.segmentation.train import run as segment
from pretexts.engine.training import arithmetic, run_base
from pretexts.engine.training.caller_state import cuda_flags, keeps_caller_state, set_cuda_flags

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread
SILENT = dict(echo=lambda line: None)


def pretrain_config(out, seed: int = 0, **extra) -> pretexts.PretrainConfig:
    common = dict(backbone="test_convnext", epochs=1, batch_size=8, max_steps_per_epoch=2, eval_images=8)
    common |= dict(figure_images=2, monitor_every=0, workers=0, force=True, quiet=True)
    return pretexts.PretrainConfig(out=str(out), seed=seed, **{**common, **extra})


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path, _ = write_checkpoint(tmp_path_factory.mktemp("caller-state") / "ckpt.pt")
    return str(path)


@pytest.fixture(scope="module")
def segmentation_data(tmp_path_factory):
    return str(write_generated(tmp_path_factory.mktemp("seg") / "d", 8, 4, 32))


def draws() -> tuple:
    return torch.rand(3).tolist(), random.random(), np.random.rand(3).tolist()


def caller_state() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def set_caller_state(state: tuple) -> None:
    torch.set_rng_state(state[0])
    random.setstate(state[1])
    np.random.set_state(state[2])


def finetune(out, ckpt, seg):
    cfg = pretexts.FinetuneConfig(checkpoint=ckpt, out=str(out), epochs=1, max_steps_per_epoch=1, **SMALL_DATA)
    pretexts.finetune(cfg, **SILENT)


def probe(out, ckpt, seg):
    cfg = pretexts.ProbeConfig(checkpoint=ckpt, out=str(out), probes=("linear", "knn"), max_images=32, workers=0)
    pretexts.run_probe(cfg, **SILENT)


def segmentation(out, ckpt, seg):
    small = dict(backbone="test_resnet", img_size=32, head="linear", batch_size=4, epochs=1)
    segment(SegmentConfig(data=seg, out=str(out), **small), log=lambda line: None)


ENTRIES = {
    "pretrain": lambda out, ckpt, seg: pretexts.pretrain(pretrain_config(out)),
    "finetune": finetune,
    "run_probe": probe,
    "segment": segmentation,
}


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_an_api_call_leaves_the_callers_random_generators_drawing_what_they_would_have(
    entry, checkpoint, segmentation_data, tmp_path
):
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    before = caller_state()
    expected = draws()
    set_caller_state(before)
    ENTRIES[entry](tmp_path / entry, checkpoint, segmentation_data)
    assert draws() == expected


def losses(out) -> list:
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [row["loss"] for row in rows if "loss" in row]


def test_a_seeded_run_repeats_whatever_the_callers_generators_hold(tmp_path):
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    pretexts.pretrain(pretrain_config(tmp_path / "a", seed=7))
    torch.manual_seed(2)
    random.seed(2)
    np.random.seed(2)
    pretexts.pretrain(pretrain_config(tmp_path / "b", seed=7))
    assert losses(tmp_path / "a") == losses(tmp_path / "b") and len(losses(tmp_path / "a")) == 2


@pytest.fixture
def flags_kept():
    saved = cuda_flags()
    yield
    set_cuda_flags(saved)


def test_the_cuda_arithmetic_a_run_sets_is_the_callers_again_after_it(monkeypatch, flags_kept, tmp_path):
    """On CUDA a run sets TF32 and cuDNN's autotuning (here as if on CUDA: the CPU run is handed a CUDA device for
    that call alone); after `pretrain` returns, the caller's flags hold again."""
    during = []

    def as_on_cuda(device, tf32, cudnn_benchmark):
        arithmetic.use_cuda_arithmetic(torch.device("cuda"), tf32, cudnn_benchmark)
        during.append(cuda_flags())

    monkeypatch.setattr(run_base, "use_cuda_arithmetic", as_on_cuda)
    set_cuda_flags(("highest", False, False))
    pretexts.pretrain(pretrain_config(tmp_path / "run"))
    assert during == [("high", True, True)]  # the run's defaults were set while it ran
    assert cuda_flags() == ("highest", False, False)


def test_the_state_is_put_back_when_the_run_raises(flags_kept):
    @keeps_caller_state
    def failing():
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)
        arithmetic.use_cuda_arithmetic(torch.device("cuda"), True, True)
        raise pretexts.ParameterError("refused")

    torch.manual_seed(5)
    set_cuda_flags(("highest", False, False))
    before = caller_state()
    expected = draws()
    set_caller_state(before)
    with pytest.raises(pretexts.ParameterError):
        failing()
    assert draws() == expected and cuda_flags() == ("highest", False, False)
    assert failing.__name__ == "failing"


def test_a_caller_on_torchs_newer_precision_settings_can_call_a_run(tmp_path):
    """torch's legacy precision getters refuse to read a precision set through `torch.backends.fp32_precision`;
    the saved state then skips them, and the caller's setting is still theirs after the run."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import torch, pretexts
        torch.backends.fp32_precision = "tf32"
        pretexts.pretrain(pretexts.PretrainConfig(out={str(tmp_path / "run")!r}, backbone="test_convnext", epochs=1,
            batch_size=8, max_steps_per_epoch=1, eval_images=8, monitor_every=0, workers=0, quiet=True))
        print(torch.backends.fp32_precision)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "tf32"
