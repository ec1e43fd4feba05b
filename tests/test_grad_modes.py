"""The finite-difference gradient mode matches the exact double backward; speed options keep the gradient."""

import pytest
import torch
import torch.nn.functional as F
from timm.layers import set_reentrant_ckpt, use_reentrant_ckpt

import pretexts
from pretexts.backbones.factory import set_grad_checkpointing
from pretexts.engine import EnergyMethod, PretrainConfig, restoration_loss, restore
from pretexts.engine.methods.energy.grad_modes import FD_DELTA
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.states import prepare_task, state_adapter
from pretexts.errors import ParameterError


def tiny_vit(**kwargs):
    torch.manual_seed(0)
    return create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2, **kwargs)


def gradients(model, task, sample, mode: str, seed: int = 0, amp: torch.dtype | None = None, fd_delta=FD_DELTA):
    """(flattened parameter gradient without alpha, alpha's gradient) of the two-step restoration loss."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the same dropout masks in both modes
    with torch.autocast("cpu", amp, enabled=amp is not None):
        states = restore(model, task, sample, steps=2, grad_mode=mode, fd_delta=fd_delta)
    restoration_loss(states, sample.target).backward()
    params = [
        p.grad if p.grad is not None else torch.zeros_like(p)
        for name, p in model.named_parameters()
        if name != "log_alpha"
    ]
    return torch.cat([g.flatten() for g in params]), model.log_alpha.grad.clone()


def assert_same_direction(model, task, sample, **kwargs):
    exact, exact_alpha = gradients(model, task, sample, "exact", **kwargs)
    estimate, estimate_alpha = gradients(model, task, sample, "finite-difference", **kwargs)
    assert exact.norm() > 0
    bound = 0.9999 if kwargs.get("fd_delta", FD_DELTA) <= 1e-3 else 0.999  # docs/performance.md's bounds
    assert F.cosine_similarity(exact, estimate, dim=0) >= bound
    assert estimate.norm() / exact.norm() == pytest.approx(1.0, rel=0.05)
    torch.testing.assert_close(estimate_alpha, exact_alpha, rtol=1e-4, atol=1e-12)  # alpha's is exact


@pytest.mark.parametrize("task_name", ["colorization", "denoising", "patch-sorting"])
def test_finite_difference_gradient_matches_exact_on_a_vit(task_name, real_images):
    model = tiny_vit()
    task = pretexts.create_pretext(task_name, **({"edge_max": 1} if task_name == "patch-sorting" else {}))
    task = state_adapter(task, model).prepare()
    assert_same_direction(model, task, task(real_images[:8], torch.Generator().manual_seed(0)))


@pytest.mark.parametrize(
    "name, task_name, fd_delta",
    [
        ("convnext_atto", "colorization", FD_DELTA),
        ("convnext_atto", "random-mask", FD_DELTA),
        ("convnext_atto", "random-mask", 1e-3),
        ("test_convnext", "random-mask", 1e-3),  # 0.966 at 1e-2: the O(delta^2) error ConvNeXt shows first
    ],
)
def test_finite_difference_gradient_matches_exact_on_convnext(name, task_name, fd_delta, real_images):
    torch.manual_seed(0)
    model = create_energy_model(name, img_size=32)
    task = prepare_task(pretexts.create_pretext(task_name), model)
    assert_same_direction(model, task, task(real_images[:8], torch.Generator().manual_seed(0)), fd_delta=fd_delta)


def test_an_images_estimate_does_not_depend_on_its_batch(real_images):
    """eps is per image, so a batch split over DDP ranks averages to the whole batch's gradient."""
    model = tiny_vit()
    task = pretexts.create_pretext("colorization")
    whole, _ = gradients(model, task, task(real_images[:8]), "finite-difference")
    halves = [gradients(model, task, task(part), "finite-difference")[0] for part in real_images[:8].split(4)]
    torch.testing.assert_close(whole, (halves[0] + halves[1]) / 2, rtol=1e-3, atol=1e-9)


def test_difference_passes_replay_the_dropout_masks(real_images):
    model = tiny_vit(drop_path_rate=0.3, proj_drop_rate=0.1)
    task = pretexts.create_pretext("colorization")
    assert_same_direction(model, task, task(real_images[:8]), seed=3)


def test_finite_difference_under_bf16_autocast_stays_accurate(real_images):
    model = tiny_vit()
    task = pretexts.create_pretext("colorization")
    assert_same_direction(model, task, task(real_images[:8]), amp=torch.bfloat16)


def test_evaluation_takes_the_same_first_order_gradient_in_both_modes(real_images):
    model = tiny_vit().eval()
    task = pretexts.create_pretext("colorization")
    sample = task(real_images[:4])
    with torch.no_grad():
        exact = restore(model, task, sample, steps=2)
        estimate = restore(model, task, sample, steps=2, grad_mode="finite-difference")
    for a, b in zip(exact, estimate):
        assert torch.equal(a, b)


def test_unknown_grad_modes_are_refused():  # both modes under --compile: tests/test_compile.py
    with pytest.raises(ParameterError, match="grad_mode"):
        EnergyMethod.parse_args(PretrainConfig(method_args={"grad_mode": "approximate"}))


def test_finite_difference_refuses_relu_and_batchnorm_backbones():
    model = create_energy_model("resnet18")
    cfg = PretrainConfig(backbone="resnet18", method_args={"grad_mode": "finite-difference"})
    with pytest.raises(ParameterError, match="smooth, per-image energy"):
        EnergyMethod(cfg, None, torch.device("cpu")).apply_speedups(model)


@pytest.mark.parametrize("option", ["grad_checkpointing", "channels_last"])
def test_memory_options_keep_the_exact_gradient(option, real_images):
    task = pretexts.create_pretext("colorization")
    sample = task(real_images[:4])
    plain = tiny_vit()
    optioned = EnergyMethod(PretrainConfig(**{option: True}), task, torch.device("cpu")).apply_speedups(tiny_vit())
    optioned.load_state_dict(plain.state_dict())
    expected, _ = gradients(plain, task, sample, "exact")
    got, _ = gradients(optioned, task, sample, "exact")
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-9)


def test_grad_checkpointing_is_forced_non_reentrant():
    saved = use_reentrant_ckpt()
    try:
        set_reentrant_ckpt(True)
        with pytest.warns(UserWarning, match="non-reentrant"):
            set_grad_checkpointing(tiny_vit().backbone)
        assert use_reentrant_ckpt() is False
    finally:
        set_reentrant_ckpt(saved)
