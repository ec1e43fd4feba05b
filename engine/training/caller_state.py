"""The caller's process as the Python API found it: a run seeds the global random generators (torch's, Python's
`random`, numpy's) for its own draws and, on CUDA, sets TF32 and cuDNN's autotuning (`use_cuda_arithmetic`). A
library function leaves them as the caller had them, as timm's and Kornia's do: `keeps_caller_state` puts them back
when the run returns or raises. The run's own numbers do not change: it seeds itself whatever state it finds."""

import functools
import random
from contextlib import contextmanager

import numpy as np
import torch


def cuda_flags() -> tuple | None:
    """float32 matmuls' precision (TF32 unless "highest"), cuDNN's TF32 and its autotuning, as `use_cuda_arithmetic`
    sets them; None where the caller chose its precision through torch's newer `fp32_precision` settings, which the
    legacy getters refuse to read (a run then sets nothing on the CPU, and on CUDA fails as torch says)."""
    try:
        return torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark
    except RuntimeError:
        return None


def set_cuda_flags(flags: tuple | None) -> None:
    if flags is None:
        return
    torch.set_float32_matmul_precision(flags[0])
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = flags[1], flags[2]


@contextmanager
def caller_state_kept():
    """Within: anything. After, however it ends: the global generators' states (torch's CPU and CUDA ones, Python's,
    numpy's; not MPS's or XPU's) and the CUDA arithmetic flags are the caller's again."""
    cpu, python, numpy_state, flags = torch.get_rng_state(), random.getstate(), np.random.get_state(), cuda_flags()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    seed = torch.initial_seed()  # what CUDA's generators start from when CUDA starts later (torch.manual_seed's)
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        random.setstate(python)
        np.random.set_state(numpy_state)
        set_cuda_flags(flags)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        elif torch.cuda.is_available():  # started by the run, or a seed of its queued for when CUDA starts
            torch.cuda.manual_seed_all(seed)


def keeps_caller_state(function):
    """`function` (a run of the Python API) leaves the caller's random generators and CUDA flags as it found them."""

    @functools.wraps(function)
    def kept(*args, **kwargs):
        with caller_state_kept():
            return function(*args, **kwargs)

    return kept
