"""Data parallelism under torchrun: process-group setup and teardown, the DDP wrapper, and the collectives the
commands share (a strided shard of a dataset, its rows gathered back in order, sums and means over ranks).

`torchrun --nproc-per-node K -m pretexts train|finetune|probe|segment ...` starts K processes with RANK,
WORLD_SIZE and LOCAL_RANK set; each joins one process group (nccl on CUDA, one GPU per process; gloo on the CPU).
"""

import argparse
import contextlib
import functools
import io
import os
import shlex
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, Subset

from pretexts.errors import ParameterError, PretextsError

_created_here = False  # teardown only ends a group that setup started


def launched() -> bool:
    """True in a process started by torchrun with more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def launched_world() -> int:
    """The number of processes torchrun started (1 otherwise), known before the process group exists."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's rank under torchrun (0 otherwise), known before and after the process group exists."""
    return int(os.environ.get("RANK", "0")) if launched() else 0


def setup(device: torch.device, global_batch: int | None = None, accum_iter: int = 1) -> tuple[int, int, torch.device]:
    """(rank, world size, this process's device); joins the process group when launched by torchrun. The global
    batch must split evenly over the processes, and each process's share into `accum_iter` micro-batches."""
    global _created_here
    if not launched() and not dist.is_initialized():
        check_batch(global_batch, 1, accum_iter)
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo", device_id=device if device.type == "cuda" else None
        )
        _created_here = True
    rank, world = dist.get_rank(), dist.get_world_size()
    check_batch(global_batch, world, accum_iter)
    return rank, world, device


def check_batch(global_batch: int | None, world: int, accum_iter: int) -> None:
    if global_batch is not None and global_batch % world:
        raise ParameterError(
            f"--batch-size {global_batch} is the global batch and must split evenly over "
            f"{world} processes; use a multiple of {world}."
        )
    if global_batch is not None and (global_batch // world) % accum_iter:
        raise ParameterError(
            f"--accum-iter {accum_iter} must divide each process's batch of {global_batch // world} "
            f"images into equal micro-batches."
        )


def teardown() -> None:
    """Wait for every rank (rank 0 writes the last files), then end the group that `setup` started. Called while an
    error propagates (a lost rank), it waits for no one: a barrier would fail a second time."""
    global _created_here
    if _created_here and dist.is_initialized():
        if sys.exc_info()[1] is None:
            dist.barrier()
        dist.destroy_process_group()
        _created_here = False


class LostRankError(PretextsError, RuntimeError):
    """A rank of a torchrun run ended (killed, out of memory, its machine gone) and the survivors cannot go on."""


# how gloo and nccl report a peer that is gone (a dead process closes its sockets; a dead machine times out)
LOST_PEER = (
    "closed by peer",
    "reset by peer",
    "broken pipe",
    "socket timeout",
    "timed out",
    "communicator was aborted",
)


@contextlib.contextmanager
def lost_rank_reported(world: int, rank: int, out):
    """Under torchrun, a collective that fails because a rank is gone becomes one LostRankError line on each
    survivor: which rank was lost and the command that resumes from the last checkpoint (it keeps every step
    up to its save)."""
    try:
        yield
    except (RuntimeError, dist.DistError) as err:
        if world == 1 or not any(words in str(err).lower() for words in LOST_PEER):
            raise
        lost = f"rank {1 - rank}" if world == 2 else f"another of the {world} ranks"
        saved = Path(out) / "checkpoint.pt"
        then = (
            f"resume from {saved} with: {resume_command()}"
            if saved.is_file()
            else "no epoch had finished, so start it again (same command)"
        )
        raise LostRankError(f"{lost} was lost (its process ended or became unreachable); {then}.") from None


def resume_command() -> str:
    """This torchrun command with --resume (a --resume PATH becomes a bare --resume: the run's own checkpoint). Over
    several nodes it keeps the launch's node count and rendezvous, and is to be run on every node."""
    args, kept = sys.argv[1:], []
    while args:
        arg = args.pop(0)
        if arg.startswith("--resume="):
            continue
        if arg == "--resume":
            if args and not args[0].startswith("-"):
                args.pop(0)
            continue
        kept.append(arg)
    local = os.environ.get("LOCAL_WORLD_SIZE", "1")
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    if nodes <= 1:
        return f"torchrun --nproc-per-node {local} -m pretexts {shlex.join(kept)} --resume"
    options = node_options(launch_options())
    # the agent's command line unread (not Linux): its rendezvous is known only to whoever launched it
    launch = shlex.join(options) if options else f"--nnodes {nodes} --nproc-per-node {local} <the launch's rendezvous>"
    where = "every node, each with its own --node-rank" if "--node-rank" in launch else "every node"
    return f"torchrun {launch} -m pretexts {shlex.join(kept)} --resume, on {where}"


def launch_options() -> argparse.Namespace | None:
    """The torchrun options this process's agent (its parent) was started with, parsed by torchrun's own parser
    (so their defaults from PET_* variables count too); None where that command line cannot be read."""
    try:
        argv = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().decode().split("\0")[:-1]
    except (OSError, UnicodeDecodeError):
        return None
    starts = [i for i, arg in enumerate(argv) if arg == "torch.distributed.run" or Path(arg).name == "torchrun"]
    if not starts:
        return None
    from torch.distributed.run import get_args_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return get_args_parser().parse_args(argv[starts[0] + 1 :])
    except SystemExit:  # not torchrun's arguments after all
        return None


def node_options(launch) -> list[str] | None:
    """The node count, processes per node and rendezvous of a multi-node launch, as torchrun options: the c10d
    (or etcd) rendezvous, or the static one (each node has its own --node-rank: this node's is shown)."""
    if launch is None:
        return None
    options = ["--nnodes", launch.nnodes, "--nproc-per-node", str(launch.nproc_per_node)]
    if launch.rdzv_backend == "static":
        options += ["--node-rank", os.environ.get("GROUP_RANK", str(launch.node_rank))]
        if launch.rdzv_endpoint:
            options += ["--rdzv-endpoint", launch.rdzv_endpoint]
        else:
            options += ["--master-addr", launch.master_addr, "--master-port", str(launch.master_port)]
    else:
        options += ["--rdzv-backend", launch.rdzv_backend, "--rdzv-endpoint", launch.rdzv_endpoint]
        options += ["--rdzv-id", launch.rdzv_id] + (["--rdzv-conf", launch.rdzv_conf] if launch.rdzv_conf else [])
    if launch.max_restarts:
        options += ["--max-restarts", str(launch.max_restarts)]
    return options


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


def to_sync_batchnorm(model: nn.Module) -> nn.Module:
    """`model`'s BatchNorm layers as SyncBatchNorm, in place, with the same parameters. timm's conversion, not
    torch's: torch's turns timm's BatchNormAct2d (EfficientNet, RegNet, ...) into a plain SyncBatchNorm whose
    activation and drop never run; timm's keeps them (SyncBatchNormAct)."""
    from timm.layers import convert_sync_batchnorm  # timm only where a run syncs its BatchNorm

    return convert_sync_batchnorm(model)


def replicate(model: nn.Module, device: torch.device, sync_batchnorm: bool = False) -> DistributedDataParallel:
    """DDP around `model` (rank 0's weights are broadcast). static_graph: the set of parameters the
    loss reaches is the same every step but not all of them (a final norm's bias has no dE/dx). `sync_batchnorm`
    turns its BatchNorm layers into SyncBatchNorm in place (the same parameters, so an optimiser built before
    still holds them): statistics over the global batch, as one process computes them (mmsegmentation's SyncBN).
    PyTorch's SyncBatchNorm runs on GPUs only: on the CPU (gloo) each rank normalises over its own share."""
    if sync_batchnorm and device.type != "cpu":
        to_sync_batchnorm(model)
    for param in model.parameters():  # only a dimension of size 1 lets a gradient's strides differ in the same memory
        if param.requires_grad and param.dim() > 1 and 1 in param.shape:
            param.register_hook(functools.partial(with_strides, param.stride()))
    return DistributedDataParallel(
        LossInForward(model), device_ids=[device.index] if device.type == "cuda" else None, static_graph=True
    )


def with_strides(strides: tuple[int, ...], grad: torch.Tensor) -> torch.Tensor:
    """`grad` with its parameter's `strides` where the two differ only in dimensions of size 1 (the same memory: such
    a stride never moves an address). A convolution fed channels-last activations (timm's LayerNorm2d, in ConvNeXt,
    permutes to channels-last and back) returns its weight's gradient channels-last: for a [C, 1, k, k] depthwise
    weight strides (k*k, 1, k, 1), the weight's being (k*k, k*k, k, 1). Autograd accepts that, but DDP compares every
    stride with its bucket's, which follow the parameter's, and warned "Grad strides do not match bucket view
    strides" on each rank."""
    if (
        grad.layout != torch.strided
        or grad.stride() == strides
        or any(size != 1 and have != want for size, have, want in zip(grad.shape, grad.stride(), strides))
    ):
        return grad
    return grad.as_strided(grad.shape, strides)


def through(replicated: DistributedDataParallel | None, compute, *args):
    """`compute(*args)`, inside DDP's forward when the run is replicated (that arms the gradient all-reduce)."""
    return compute(*args) if replicated is None else replicated(compute, *args)


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


def agreed_stop(stop, device: torch.device, world: int) -> bool:
    """True on every rank when SIGTERM or Ctrl-C reached one (a `StopSignals`); checked between optimiser steps,
    so all ranks stop at the same step. A rank stopped by another records SIGTERM."""
    requested = any_rank(stop.requested, device, world)
    if requested and not stop.requested:
        stop.signal = signal.SIGTERM
    return requested


def share_buffers(model: nn.Module, world: int) -> None:
    """Rank 0's buffers (BatchNorm running statistics) on every rank: each updates its own in a forward, so before an
    evaluation split over the ranks they must be the ones rank 0 saves."""
    if world > 1:
        for buffer in model.buffers():
            dist.broadcast(buffer, 0)


def barrier(world: int) -> None:
    """Every rank waits here (for files rank 0 writes) under torchrun."""
    if world > 1:
        dist.barrier()


def shard(dataset: Dataset, rank: int, world: int) -> Dataset:
    """Every `world`-th item from `rank` on, in order: evaluation splits unevenly but counts each item once
    (a DistributedSampler pads with repeats)."""
    return dataset if world == 1 else Subset(dataset, range(rank, len(dataset), world))


def gather_shards(rows: torch.Tensor, device: torch.device, world: int) -> torch.Tensor:
    """Every rank's rows of a `shard`, interleaved back into the dataset's order, on every rank (sent through
    `device`: nccl moves CUDA tensors only)."""
    if world == 1:
        return rows
    counts = [torch.zeros((), dtype=torch.long, device=device) for _ in range(world)]
    dist.all_gather(counts, torch.tensor(rows.shape[0], device=device))
    counts = [int(count) for count in counts]
    padded = rows.new_zeros((max(counts), *rows.shape[1:]), device=device)
    padded[: rows.shape[0]] = rows.to(device)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    whole = rows.new_empty((sum(counts), *rows.shape[1:]))
    for rank, (part, count) in enumerate(zip(parts, counts)):
        whole[rank::world] = part[:count].to(rows.device)
    return whole


def sum_over_ranks(values: torch.Tensor, device: torch.device, world: int) -> torch.Tensor:
    """`values` summed element-wise over every rank (counts of correct images, a confusion matrix)."""
    if world == 1:
        return values
    total = values.to(device)
    dist.all_reduce(total)
    return total.to(values.device)
