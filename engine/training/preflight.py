"""Checks made before training starts, so a bad setting fails in seconds, not at the first save."""

import os
import re
import shutil
from pathlib import Path

import torch

from pretexts.engine.modules.eval_mode import eval_mode
from pretexts.errors import OutputError, ParameterError


def check_compile_backend(backend: str) -> None:
    """A --compile backend torch knows (`torch._dynamo.list_backends`, its debugging ones included); an unknown one
    is refused before the run starts, naming the backends there are, instead of torch's InvalidBackend at the
    first compiled call."""
    import torch._dynamo  # here, not at import: it takes seconds, and only --compile needs it

    known = torch._dynamo.list_backends(exclude_tags=())
    if backend not in known:
        main = torch._dynamo.list_backends()
        debug = [name for name in ("eager", "aot_eager") if name in known]
        to_debug = f", or {' / '.join(debug)} to debug" if debug else ""
        raise ParameterError(
            f"--compile {backend!r} is not a torch.compile backend; use one of {', '.join(main)} (--compile alone: "
            f"inductor){to_debug}; auto (the default) compiles where it pays; off runs eagerly."
        )


def resolve_device(name: str) -> torch.device:
    """'auto' (CUDA when there is one), 'cpu', 'cuda', 'cuda:1', 'mps', 'xpu', ...; ParameterError for a device
    this machine lacks (and for 'meta', which holds no data), instead of torch's error at the first tensor moved
    there."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ParameterError(f"unknown device '{name}'; use auto, cpu, cuda or cuda:N.") from None
    here = " or ".join(machine_devices())
    if device.type == "meta":
        raise ParameterError(
            f"device 'meta' holds no data (tensors without storage), so no run can use it; use --device {here}."
        )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError(f"device '{name}' asked, but no CUDA GPU is available; use --device cpu.")
    if not type_available(device.type):
        raise ParameterError(
            f"device '{name}' asked, but this machine has no {device.type} device; use --device {here}."
        )
    count = device_count(device.type)
    if device.index is not None and count is not None and device.index >= count:
        kind, some = device.type, "is 1" if count == 1 else f"are {count}"
        names = f"{kind}:0" if count == 1 else f"{kind}:0 to {kind}:{count - 1}"
        raise ParameterError(f"device '{name}' asked, but there {some} {kind} device{'s' * (count != 1)} ({names}).")
    return device


def machine_devices() -> list[str]:
    """The device types a run can use here: 'cpu' and the accelerator torch finds (`torch.accelerator`, torch 2.6
    and later; CUDA's own check before it)."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or not hasattr(accelerator, "current_accelerator"):
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    found = accelerator.current_accelerator() if accelerator.is_available() else None
    return ["cpu", found.type] if found is not None and found.type != "cpu" else ["cpu"]


def type_available(kind: str) -> bool:
    """Whether a device of this type is here: its torch module's `is_available` (torch.cuda, torch.mps, torch.xpu,
    a backend plugin's), else whether torch can make a tensor on it (a type whose plugin is not installed fails)."""
    if kind == "cpu":
        return True
    check = getattr(getattr(torch, kind, None), "is_available", None)
    try:
        if callable(check):
            return bool(check())
        torch.empty(0, device=kind)
        return True
    except (RuntimeError, AssertionError, ImportError):  # as torch answers a backend it was built without
        return False


def device_count(kind: str) -> int | None:
    """How many devices of this type there are; None where its torch module does not say."""
    count = getattr(getattr(torch, kind, None), "device_count", None)
    return count() if callable(count) and kind != "cpu" else None


def check_backbone_fits(model: torch.nn.Module, name: str, img_size: int, device: torch.device, forward=None) -> None:
    """One forward pass (`forward`, by default the model's) of two blank images, so an image too small for the
    backbone's downsampling fails now with a clear message instead of a convolution error at the first step,
    and one too large for the memory says so (with about what it needs) instead of a CUDA or allocator error."""
    try:
        images = torch.zeros(2, 3, img_size, img_size, device=device)
        with eval_mode(model), torch.no_grad(), torch.compiler.set_stance("force_eager"):  # compile once, later
            (forward or model)(images)
    except (torch.OutOfMemoryError, MemoryError) as err:
        raise too_large(err, img_size, device) from None
    except RuntimeError as err:
        if OUT_OF_MEMORY.search(str(err)):
            raise too_large(err, img_size, device) from None
        reason = " ".join(str(err).split())[:200]
        if backbone_runs(model, images):  # the size is not what failed: the method's own model did (a plugin's)
            raise ParameterError(
                f"the {type(model).__name__} model failed its first forward at image size {img_size} ({reason}); "
                "a method's model needs a forward of images, or the method a probe_forward (--debug: the "
                "traceback)."
            ) from err
        raise ParameterError(
            f"backbone '{name}' cannot run at image size {img_size} ({reason}); use a larger --img-size."
        ) from None


def backbone_runs(model: torch.nn.Module, images: torch.Tensor) -> bool:
    """Whether the model's `backbone` (where it has one) takes these images."""
    backbone = getattr(model, "backbone", None)
    if not isinstance(backbone, torch.nn.Module):
        return False
    try:
        with eval_mode(backbone), torch.no_grad(), torch.compiler.set_stance("force_eager"):
            backbone(images)
    except RuntimeError:
        return False
    return True


# CUDA's and MPS's "out of memory", the CPU allocator's "can't allocate memory"
OUT_OF_MEMORY = re.compile(
    r"out of memory|not enough memory|(can't|cannot|unable to|failed to|tried to) allocate", re.IGNORECASE
)
# what the failed allocation asked for: "Tried to allocate 12.00 GiB" (CUDA), "allocate 123456 bytes" (CPU)
ASKED = re.compile(r"allocate (\d+(?:\.\d+)?) ?(bytes|[KMGT]i?B)", re.IGNORECASE)
UNITS = {
    "bytes": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def too_large(err: BaseException, img_size: int, device: torch.device) -> ParameterError:
    """'image size N needs about X GB ...': X is the allocation that failed (one tensor of the two-image test
    forward), or the two test images themselves where the error does not say."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    asked = ASKED.search(str(err))
    needed = float(asked[1]) * UNITS[asked[2].lower()] if asked else 2 * 3 * img_size**2 * 4
    amount = (
        f"{needed / 1e9:.0f} GB"
        if needed >= 1e10
        else f"{needed / 1e9:.2g} GB"
        if needed >= 1e8
        else f"{needed / 1e6:.2g} MB"
    )
    return ParameterError(
        f"image size {img_size} needs about {amount} or more even for a batch of 2 images, more "
        f"than the memory of {device} has free; use a smaller --img-size (a smaller --batch-size "
        f"cannot help)."
    )


def check_task_fits(task, img_size: int, device: torch.device) -> None:
    """Corrupt two blank images once, so a parameter that does not fit the image size (a mask grid or a
    super-resolution scale that leaves fewer than 4 cells per side) fails now, and the scaled defaults are
    resolved for `img_size` (`Pretext.fit`); each sub-task of a mixture is tried, its error naming the mixture."""
    images = torch.zeros(2, 3, img_size, img_size, device=device)
    for part in task.subtasks or [task]:
        try:
            part(images, torch.Generator(device=device).manual_seed(0))
        except ParameterError as err:
            if part is task:
                raise
            raise ParameterError(f"{task.name}: sub-task {err}") from None


def checkpoint_bytes(model: torch.nn.Module) -> int:
    """About the size of a checkpoint: the weights, AdamW's two moments per weight, and 16 MB more."""
    weights = sum(t.numel() * t.element_size() for t in model.parameters())
    buffers = sum(t.numel() * t.element_size() for t in model.buffers())
    return 3 * weights + buffers + (16 << 20)


def check_output_dir(out: Path, needed: int) -> None:
    """OUT can be created and written (a file is made and removed) and has room for one more
    checkpoint (the new one is written beside the old before the rename)."""
    probe = Path(out) / f".write-test.{os.getpid()}"
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise OutputError(
            f"output folder '{out}' cannot be written: {err.strerror or err}; choose another --out."
        ) from None
    free = shutil.disk_usage(out).free
    if free < needed:
        raise OutputError(
            f"output folder '{out}' has {free / 2**20:.0f} MB free, but a checkpoint needs "
            f"about {needed / 2**20:.0f} MB; free some space or choose another --out."
        )
