"""On CUDA a run sets its float32 arithmetic: TF32 and cuDNN's autotuning on by default, each with an option that
turns it off, and recorded in results.json's arithmetic; elsewhere nothing changes."""

import pytest
import torch

from pretexts.engine.training.arithmetic import use_cuda_arithmetic
from pretexts.engine.training.config import PretrainConfig


@pytest.fixture
def restored_backends():
    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved[1:]


def backends() -> tuple:
    return torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark


def test_on_by_default_and_each_turned_off_by_its_option(restored_backends):
    cfg = PretrainConfig()
    assert (cfg.tf32, cfg.cudnn_benchmark) == (True, True)
    use_cuda_arithmetic(torch.device("cuda"), cfg.tf32, cfg.cudnn_benchmark)
    assert backends() == ("high", True, True)
    use_cuda_arithmetic(torch.device("cuda"), False, False)
    assert backends() == ("highest", False, False)


def test_nothing_changes_off_cuda(restored_backends):
    before = backends()
    use_cuda_arithmetic(torch.device("cpu"), True, True)
    assert backends() == before


def test_the_options_parse_and_a_resume_may_change_them():
    from click.testing import CliRunner

    from pretexts.cli import main
    from pretexts.engine.training.resume_config import FINETUNE_MAY_CHANGE, PRETRAIN_MAY_CHANGE

    for command in ("train", "finetune", "segment"):
        text = CliRunner().invoke(main, [command, "--help"]).output
        assert "--tf32 / --no-tf32" in text and "--cudnn-benchmark / --no-cudnn-benchmark" in text
    assert {"tf32", "cudnn_benchmark"} <= PRETRAIN_MAY_CHANGE & FINETUNE_MAY_CHANGE
