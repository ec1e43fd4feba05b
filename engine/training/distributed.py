"""Data-parallel training under torchrun: process-group setup and teardown, and the DDP wrapper.

`torchrun --nproc-per-node K -m pretexts train ...` starts K processes with RANK, WORLD_SIZE and
LOCAL_RANK set; each joins one process group (nccl on CUDA, one GPU per process; gloo on the CPU).
"""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from pretexts.errors import ParameterError

_created_here = False  # teardown only ends a group that setup started


def launched() -> bool:
    """True in a process started by torchrun with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(device: torch.device, global_batch: int) -> tuple[int, int, torch.device]:
    """(rank, world size, this process's device); joins the process group when launched by torchrun."""
    global _created_here
    if not launched() and not dist.is_initialized():
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                device_id=device if device.type == "cuda" else None)
        _created_here = True
    rank, world = dist.get_rank(), dist.get_world_size()
    if global_batch % world:
        raise ParameterError(f"--batch-size {global_batch} is the global batch and must split evenly over "
                             f"{world} processes; use a multiple of {world}.")
    return rank, world, device


def teardown() -> None:
    """Wait for every rank (rank 0 writes the last files), then end the group that `setup` started."""
    global _created_here
    if _created_here and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        _created_here = False


class LossInForward(nn.Module):
    """Holds the model, so DDP sees its parameters; `forward(compute, *args)` runs `compute(*args)`.

    DDP arms its gradient all-reduce in its own forward. The energy is reached through
    `task.energy` -> `model.energy` (and a ViT forward of its own for patch sorting), never
    `model.forward`, so the whole loss, restoration included, must run inside this forward.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, compute, *args):
        return compute(*args)


def replicate(model: nn.Module, device: torch.device) -> DistributedDataParallel:
    """DDP around `model` (rank 0's weights are broadcast). static_graph: the set of parameters the
    loss reaches is the same every step but not all of them (a final norm's bias has no dE/dx)."""
    return DistributedDataParallel(LossInForward(model), device_ids=[device.index] if device.type == "cuda" else None,
                                   static_graph=True)


def global_mean(value: torch.Tensor, world: int) -> float:
    """The mean of a scalar over all ranks, so every rank logs and decides on the same number."""
    if world == 1:
        return value.item()
    value = value.detach().float().clone()
    dist.all_reduce(value)
    return value.item() / world


def any_rank(flag: bool, device: torch.device, world: int) -> bool:
    """True on every rank when `flag` is True on one of them (a stop signal seen by one rank)."""
    if world == 1:
        return flag
    value = torch.tensor(float(flag), device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
