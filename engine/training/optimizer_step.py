"""One optimiser step, the same for pretraining, fine-tuning and segmentation.

The whole block around `optimizer.step()` lives here once: the loss over micro-batches (gradient accumulation,
DDP's all-reduce on the last one only), fp16 loss scaling, the gradient norm (clipped under --clip-grad; pretraining
logs it), the non-finite policy (`NonFiniteGuard`: stop with a clear message, or skip and count under
--skip-nonfinite) and the per-step learning-rate schedule. MAE's `NativeScalerWithGradNormCount` does the scaling
part of it.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from pretexts.engine.training import distributed
from pretexts.engine.training.nonfinite import NonFiniteGuard


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
    carry its state), `nonfinite` the run's guard (its count is saved too).
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
