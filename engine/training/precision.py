"""Mixed precision: which autocast dtype a run uses and its loss scaler, for every training command alike."""

from contextlib import nullcontext

import torch


def amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """bf16 on CUDA by default (the paper trains with AMP); full precision on the CPU unless asked. `--amp bf16` on
    the CPU kept the held-out restoration error (benchmarks/amp_quality.py) and is faster where the CPU has native
    bf16 (AVX512-BF16, AMX), slower where it is emulated; "auto" stays off there so a CPU run's numbers do not
    depend on which CPU it ran (docs/results/cpu-speed.md)."""
    if amp == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}[amp]


def precision_name(dtype: torch.dtype | None) -> str:
    """How results name a run's precision: fp32, bf16 or fp16."""
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype) if dtype else nullcontext()


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """fp16 needs its loss scaled (its gradients underflow); bf16 and full precision get a disabled scaler, which
    passes everything through, so one code path serves all three and a checkpoint always has a scaler state."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
