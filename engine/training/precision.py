"""Mixed precision: which autocast dtype a run uses and its loss scaler, for every training command alike."""

import warnings
from contextlib import nullcontext
from functools import cache

import torch


def amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """bf16 on CUDA by default (the paper trains with AMP); full precision on the CPU unless asked. `--amp bf16` on
    the CPU kept the held-out restoration error (docs/results/cpu-speed.md) and is faster where the CPU has native
    bf16 (AVX512-BF16, AMX), slower where it is emulated; "auto" stays off there so a CPU run's numbers do not
    depend on which CPU it ran (docs/results/cpu-speed.md)."""
    if amp == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}[amp]
    if dtype == torch.bfloat16 and device.type == "cpu" and not native_cpu_bf16():
        warnings.warn(
            f"--amp bf16 on a CPU without native bf16 ({torch.backends.cpu.get_cpu_capability()}, no AVX512-BF16 "
            "or AMX): bf16 is emulated there, and a 512x512 matmul ran 40x slower than in fp32 on such a CPU "
            "(docs/performance.md); use --amp off.",
            stacklevel=2,
        )
    return dtype


@cache
def native_cpu_bf16() -> bool:
    """Whether this CPU computes bf16 natively (oneDNN's own check; False where torch cannot tell)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def precision_name(dtype: torch.dtype | None) -> str:
    """How results name a run's precision: fp32, bf16 or fp16."""
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype) if dtype else nullcontext()


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """fp16 needs its loss scaled (its gradients underflow); bf16 and full precision get a disabled scaler, which
    passes everything through, so one code path serves all three and a checkpoint always has a scaler state."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
