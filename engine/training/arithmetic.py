"""What a run's numbers depend on besides its seed and settings: the arithmetic it ran on.

A run repeats bit for bit, and a resumed run continues as if never stopped, only where these match. Elsewhere
floating-point rounding differs in the last bit, and the energy method's training amplifies that
(docs/results/representation.md). So results.json and every checkpoint record them, and a resume on other
arithmetic says so. On CUDA a run also chooses its arithmetic: TF32 and cuDNN's autotuning (`use_cuda_arithmetic`),
which a call of the Python API sets back as the caller had them when it returns (`caller_state`)."""

import torch


def arithmetic(device: torch.device, processes: int, precision: str) -> dict:
    """The torch build, processes, CPU threads and instruction set, the device type and the precision the run
    computes in as `--amp` resolved there (`precision.precision_name`: fp32, bf16 or fp16; `--amp auto` is bf16 on
    CUDA, fp32 elsewhere), and on CUDA the GPU, cuDNN and its flags."""
    info = {
        "torch": str(torch.__version__),  # a TorchVersion, which a weights-only load refuses
        "processes": processes,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device": device.type,
        "precision": precision,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cudnn"] = torch.backends.cudnn.version()
        info["tf32"] = torch.get_float32_matmul_precision() != "highest" and torch.backends.cudnn.allow_tf32
        info["cudnn_benchmark"] = torch.backends.cudnn.benchmark
    return info


def use_cuda_arithmetic(device: torch.device, tf32: bool, cudnn_benchmark: bool) -> None:
    """On CUDA, what timm's and MAE's training scripts set: float32 matmuls and convolutions in TF32 (Ampere and
    later; float32's range, a 10-bit mantissa), and cuDNN's autotuning of each convolution for the run's fixed
    shapes. Nothing on other devices. Set for the whole process: the Python API puts the caller's back on return
    (`caller_state.keeps_caller_state`)."""
    if device.type != "cuda":
        return
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = cudnn_benchmark


# how to match each recorded value again (the build and the hardware: run where the checkpoint was written)
HOW_TO_MATCH = {
    "threads": "threads: torch.set_num_threads or OMP_NUM_THREADS",
    "processes": "processes: torchrun --nproc-per-node",
    "device": "device: --device",
    "precision": "precision: the device's, as a resume keeps --amp and auto is bf16 on CUDA, fp32 elsewhere",
    "tf32": "tf32: --tf32 / --no-tf32",
    "cudnn_benchmark": "cudnn_benchmark: --cudnn-benchmark / --no-cudnn-benchmark",
}


def resumed_arithmetic_note(saved: dict | None, now: dict, path) -> str | None:
    """One warning line naming what differs ('threads 1 -> 2', 'device cpu -> cuda', 'precision fp32 -> bf16') when
    a checkpoint was written on other arithmetic than this process's; None when nothing recorded in both differs."""
    saved = saved or {}
    changed = [key for key in now if key in saved and saved[key] != now[key]]
    if not changed:
        return None
    changes = ", ".join(f"{key} {saved[key]} -> {now[key]}" for key in changed)
    precision = (
        f" It now computes in {now['precision']} where it trained in {saved['precision']}."
        if "precision" in changed
        else ""
    )
    how = "; ".join(HOW_TO_MATCH[key] for key in changed if key in HOW_TO_MATCH)
    return (
        f"warning: checkpoint '{path}' was written on other arithmetic ({changes}); the run continues, but will "
        f"not repeat an uninterrupted run bit for bit.{precision} For an exact resume, match them"
        + (f" ({how})." if how else ".")
    )
