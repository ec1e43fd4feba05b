"""One optimiser step, the same for pretraining, fine-tuning and segmentation.

The whole block around `optimizer.step()` lives here once: the loss over micro-batches (gradient accumulation,
DDP's all-reduce on the last one only), fp16 loss scaling, the gradient norm (clipped under --clip-grad; pretraining
logs it), the non-finite policy (`NonFiniteGuard`: stop with a clear message, or skip and count under
--skip-nonfinite) and the per-step learning-rate schedule. MAE's `NativeScalerWithGradNormCount` does the scaling
part of it.
"""

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from pretexts.engine.training import distributed
from pretexts.engine.training.nonfinite import NonFiniteGuard
from pretexts.errors import ParameterError


@dataclass
class StepStats:
    loss: float  # the batch's mean loss (over every rank under DDP); a skipped step's is the non-finite value seen
    lr: float  # the schedule's lr after it moved on, i.e. the next step's (`scheduled_lr`)
    # before clipping, logged per step (log.jsonl); None where not measured (fp16 without clipping: the scaler
    # checks), else measured anyway: a non-finite norm with a finite loss is the non-finite check's other half
    grad_norm: float | None
    skipped: bool


class OptimizerStep:
    """`step(loss_of, micro_batches, number)` runs optimiser step `number` (1-based) and returns its `StepStats`.

    `micro_batches` split one batch (tensors, or tuples whose first tensor counts the images); `loss_of(micro)`
    returns its mean loss, under autocast if the run asks for it and, under DDP, through `ddp`'s forward, which
    arms the gradient all-reduce. Each micro-batch's gradient is weighted by its share of the batch, so K
    micro-batches give the whole batch's step. Every call moves the schedule one step, a skipped one too, so
    the lr follows the step count. `scaler` is the run's `GradScaler` (`precision.grad_scaler`; checkpoints
    carry its state), `nonfinite` the run's guard (its count is saved too). A gradient that is exactly 0 (every
    value finite, nothing learnt: the energy's vanished alpha) is warned about once.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler,
        scaler: torch.amp.GradScaler,
        nonfinite: NonFiniteGuard,
        clip_grad: float | None = None,
        world: int = 1,
    ):
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.nonfinite, self.clip_grad, self.world = nonfinite, clip_grad, world
        self.warned_zero_gradient = False  # warned once a run

    def __call__(self, loss_of: Callable[..., torch.Tensor], micro_batches: Sequence, number: int) -> StepStats:
        self.optimizer.zero_grad(set_to_none=True)
        total = sum(images_in(micro) for micro in micro_batches)
        value = 0.0
        # every micro-batch's gradients are reduced, none under DDP's no_sync: with static_graph (which the double
        # backward needs) no_sync fails the reducer's assert at the next backward (pytorch#143580), and drops the
        # sync silently where that assert is gone; accumulation costs one all-reduce per micro-batch instead
        for micro in micro_batches:
            loss = loss_of(micro)
            part = distributed.global_mean(loss, self.world)  # every rank decides on the same number
            if self.nonfinite.should_skip(part, number):
                return self.skip(part, number)
            weight = images_in(micro) / total
            self.scaler.scale(loss * weight if len(micro_batches) > 1 else loss).backward()
            value += part * weight
        norm = self.unscale_and_clip()
        if (
            norm is not None
            and not self.scaler.is_enabled()
            and self.nonfinite.should_skip(norm, number, "gradient norm")
        ):
            return self.skip(value, number, norm)
        if norm == 0.0 and not self.warned_zero_gradient and distributed.launched_rank() == 0:
            self.warned_zero_gradient = True  # every value finite, so the non-finite guard would not tell
            warnings.warn(
                f"the gradient is exactly 0 at step {number}: no weight changes, so the run has stopped learning; "
                "check --lr and the model's settings (the energy method warns when its step size alpha vanishes).",
                stacklevel=2,
            )
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        self.scaler.step(self.optimizer)  # under fp16 the scaler itself skips a step with inf gradients
        self.scaler.update()
        self.scheduler.step_update(num_updates=number)
        lowered = self.scaler.get_scale() if scale is not None else None
        skipped = lowered is not None and lowered < scale  # the scaler lowers its scale after a step it skipped
        if skipped:
            self.nonfinite.overflowed(lowered, number)
        return StepStats(value, scheduled_lr(self.optimizer), norm, skipped)

    def unscale_and_clip(self) -> float | None:
        """The gradient norm before clipping, measured in one pass with the clip (max_norm inf only measures it);
        None under fp16 without clipping, where the scaler finds inf gradients itself."""
        if not self.clip_grad and self.scaler.is_enabled():
            return None
        self.scaler.unscale_(self.optimizer)
        # under DDP the gradients are all-reduced by now, so every rank measures the same norm
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_grad or math.inf).item()

    def skip(self, loss: float, number: int, norm: float | None = None) -> StepStats:
        """No update, but the step counts, so the schedule and the log stay aligned."""
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step_update(num_updates=number)
        return StepStats(loss, scheduled_lr(self.optimizer), norm, True)


def scheduled_lr(optimizer: torch.optim.Optimizer) -> float:
    """The lr the schedule sets: that of a group at full scale (timm's `lr_scale` 1 or none), as the fine-tune's and
    segmentation's epoch lines report it (under layer-wise decay the head's, the largest; the lower layers' are
    fractions of it); not a group scaled above it (the energy's alpha under the `fast` recipe)."""
    full = [group["lr"] for group in optimizer.param_groups if group.get("lr_scale", 1.0) == 1.0]
    return full[0] if full else max(group["lr"] for group in optimizer.param_groups)


def images_in(micro) -> int:
    """The images of one micro-batch: a tensor's first dimension, or that of a tuple's first tensor."""
    return (micro[0] if isinstance(micro, (tuple, list)) else micro).shape[0]


def split_sample(sample, batch: int, parts: int) -> list:
    """One corrupted batch as `parts` micro-batch samples, split as `images.chunk(parts)` splits its images: every
    tensor whose first dimension is `batch` is chunked, inside a dataclass, dict, list or tuple; anything else (a
    generator, a count, a sub-task's own info) is shared by every part. Corrupting the whole batch once and then
    splitting it gives each image the corruption it gets in the whole batch, whatever order a task draws in. A
    sample with no such tensor is refused: each part would be the whole batch, K times its memory."""
    if parts == 1:
        return [sample]
    if not holds_batch(sample, batch):
        raise ParameterError(
            f"--accum-iter {parts}: the method's sample ({type(sample).__name__}) holds no tensor whose first "
            f"dimension is the batch's ({batch}), so it cannot be split into micro-batches; return the images' "
            "corruption as batch-first tensors (in a dataclass, dict, list or tuple) from `corrupt`, or leave "
            "--accum-iter at 1."
        )
    return split_parts(sample, batch, parts)


def holds_batch(sample, batch: int) -> bool:
    """Whether a tensor whose first dimension is `batch` is in `sample` (a dataclass, dict, list or tuple)."""
    if isinstance(sample, torch.Tensor):
        return sample.ndim > 0 and sample.shape[0] == batch
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return any(holds_batch(getattr(sample, f.name), batch) for f in dataclasses.fields(sample) if f.init)
    values = sample.values() if isinstance(sample, dict) else sample if isinstance(sample, (list, tuple)) else ()
    return any(holds_batch(value, batch) for value in values)


def split_parts(sample, batch: int, parts: int) -> list:
    count = math.ceil(batch / math.ceil(batch / parts))  # how many parts torch.chunk makes
    if isinstance(sample, torch.Tensor):
        return list(sample.chunk(parts)) if sample.ndim and sample.shape[0] == batch else [sample] * count
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        fields = [f.name for f in dataclasses.fields(sample) if f.init]
        split = {name: split_parts(getattr(sample, name), batch, parts) for name in fields}
        return [dataclasses.replace(sample, **{name: split[name][i] for name in fields}) for i in range(count)]
    if isinstance(sample, dict):
        split = {key: split_parts(value, batch, parts) for key, value in sample.items()}
        return [{key: split[key][i] for key in sample} for i in range(count)]
    if isinstance(sample, (list, tuple)):
        split = [split_parts(value, batch, parts) for value in sample]
        rows = [[values[i] for values in split] for i in range(count)]
        return [type(sample)(*row) if hasattr(sample, "_fields") else type(sample)(row) for row in rows]
    return [sample] * count
