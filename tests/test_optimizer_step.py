"""The one optimiser step of pretraining, fine-tuning and segmentation (engine/training/optimizer_step.py)."""

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from timm.scheduler import CosineLRScheduler

from pretexts.engine.training.nonfinite import NonFiniteGuard
from pretexts.engine.training.optimizer_step import OptimizerStep
from pretexts.engine.training.precision import autocast, grad_scaler
from pretexts.errors import NonFiniteLossError

TOTAL_STEPS, WARMUP = 10, 3


def parts(seed: int = 0, dtype=None, clip_grad=None, skip=False):
    """A small MLP with AdamW, a warm-up cosine schedule and a step over them."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = CosineLRScheduler(optimizer, t_initial=TOTAL_STEPS, warmup_t=WARMUP, t_in_epochs=False)
    guard = NonFiniteGuard(skip, Path("run"))
    step = OptimizerStep(model, optimizer, scheduler, grad_scaler(torch.device("cpu"), dtype), guard, clip_grad)
    return model, step


def data(n: int = 10, seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=generator), torch.randint(3, (n,), generator=generator)


def loss_of(model, dtype=None, scale: float = 1.0):
    def loss(micro):
        inputs, labels = micro
        with autocast(torch.device("cpu"), dtype):
            return F.cross_entropy(model(inputs), labels) * scale

    return loss


def split(inputs, labels, k: int) -> list:
    return list(zip(inputs.chunk(k), labels.chunk(k)))


@pytest.mark.parametrize("k", [2, 4])  # 10 images in 4 micro-batches are 3, 3, 3 and 1: weighted by their share
def test_accumulated_micro_batches_give_the_whole_batchs_step(k):
    inputs, labels = data()
    whole_model, whole = parts()
    accum_model, accumulated = parts()
    for number in (1, 2):
        a = whole(loss_of(whole_model), [(inputs, labels)], number)
        b = accumulated(loss_of(accum_model), split(inputs, labels, k), number)
        assert b.loss == pytest.approx(a.loss, rel=1e-6) and b.grad_norm == pytest.approx(a.grad_norm, rel=1e-5)
        for p, q in zip(whole_model.parameters(), accum_model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7)  # the gradient of the step
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-7)
    assert not torch.equal(whole_model[0].weight, parts()[0][0].weight), "the weights must have moved"


def test_clip_grad_bounds_the_norm_and_reports_it_unclipped():
    inputs, labels = data()
    model, step = parts(clip_grad=0.5)
    stats = step(loss_of(model, scale=100.0), [(inputs, labels)], 1)
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert stats.grad_norm > 10 and clipped == pytest.approx(0.5, rel=1e-4)
    free_model, free = parts()
    assert free(loss_of(free_model, scale=100.0), [(inputs, labels)], 1).grad_norm == pytest.approx(stats.grad_norm)


def nan_at(number_to_poison: int, model):
    inner = loss_of(model)
    return lambda number: lambda micro: inner(micro) * float("nan") if number == number_to_poison else inner(micro)


def test_a_nan_loss_is_skipped_and_counted_with_skip_on():
    inputs, labels = data()
    model, step = parts(skip=True)
    poisoned = nan_at(2, model)
    step(poisoned(1), [(inputs, labels)], 1)
    before = copy.deepcopy(model.state_dict())
    stats = step(poisoned(2), split(inputs, labels, 2), 2)
    assert stats.skipped and step.nonfinite.skipped == 1
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "a skipped step changes nothing"
    assert stats.lr == pytest.approx(step.scheduler._get_lr(2)[0]), "the schedule moves on a skipped step too"
    assert not step(poisoned(3), [(inputs, labels)], 3).skipped


def test_a_nan_loss_stops_with_the_step_and_the_way_out_with_skip_off():
    inputs, labels = data()
    model, step = parts()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(
        NonFiniteLossError,
        match=r"loss is nan at step 1, before any update, so the lr is not the cause; .*Check the model's settings",
    ):
        step(nan_at(1, model)(1), [(inputs, labels)], 1)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_an_infinite_gradient_behind_a_finite_loss_is_the_same_fault():
    inputs, labels = data()

    def inf_gradient(model):
        def loss(micro):
            value = loss_of(model)(micro) * 1.0
            value.register_hook(lambda grad: grad * float("inf"))
            return value

        return loss

    model, step = parts()
    with pytest.raises(NonFiniteLossError, match="gradient norm is (nan|inf) at step 1"):
        step(inf_gradient(model), [(inputs, labels)], 1)
    model, step = parts(skip=True)
    stats = step(inf_gradient(model), [(inputs, labels)], 1)
    assert stats.skipped and step.nonfinite.skipped == 1 and all(torch.isfinite(p).all() for p in model.parameters())


def test_fp16_scales_the_loss_and_clips_the_unscaled_gradient():
    inputs, labels = data()
    model, step = parts(dtype=torch.float16, clip_grad=0.01)
    assert step.scaler.is_enabled() and step.scaler.get_scale() == 2.0**16
    stats = step(loss_of(model, torch.float16), [(inputs, labels)], 1)
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert not stats.skipped and stats.grad_norm > 0.1 and clipped == pytest.approx(0.01, rel=1e-3), (
        "clipped after unscaling"
    )
    full_model, full = parts()
    assert stats.grad_norm == pytest.approx(full(loss_of(full_model), [(inputs, labels)], 1).grad_norm, rel=1e-2), (
        "the norm of the true gradient, not the scaled one"
    )
    assert step.scaler.get_scale() == 2.0**16, "no overflow, so the scale stays"


def test_fp16_leaves_an_overflowing_step_to_the_scaler():
    inputs, labels = data()
    model, step = parts(dtype=torch.float16)
    before = copy.deepcopy(model.state_dict())

    def overflow(micro):
        value = loss_of(model, torch.float16)(micro) * 1.0
        value.register_hook(lambda grad: grad * float("inf"))
        return value

    stats = step(overflow, [(inputs, labels)], 1)
    # the scaler skips the update and halves its scale, as it does for fp16's routine overflows: no fault, but
    # the step is reported skipped and counted with the skipped steps
    assert stats.grad_norm is None and stats.skipped and step.nonfinite.skipped == 1
    assert step.scaler.get_scale() == 2.0**15
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_fp16_gradients_that_overflow_even_unscaled_stop_the_run_with_the_way_out():
    inputs, labels = data()
    model, step = parts(dtype=torch.float16)

    def overflow(micro):
        value = loss_of(model, torch.float16)(micro) * 1.0
        value.register_hook(lambda grad: grad * float("inf"))
        return value

    for number in range(1, 17):  # 65536 halved 16 times is 1: the scaler may still find a scale that fits
        assert step(overflow, [(inputs, labels)], number).skipped
    with pytest.raises(NonFiniteLossError, match=r"loss scale fell to 0.5 by step 17, 17 steps skipped.*--amp bf16"):
        step(overflow, [(inputs, labels)], 17)
