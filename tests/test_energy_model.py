"""The energy model and the restoration: double backward reaches the backbone, alpha stays positive."""

import pytest
import torch

import pretexts
from pretexts import backbones
from pretexts.engine import restoration_loss, restore
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.errors import ParameterError, UnknownNameError


def first_weight(model) -> torch.nn.Parameter:
    return next(p for n, p in model.backbone.named_parameters() if p.ndim > 1)


@pytest.mark.parametrize("name", ["vit_tiny", "resnet18", "swin_t"])
def test_restoration_loss_trains_backbone_only_with_double_backward(name, real_images):
    torch.manual_seed(0)
    model = create_energy_model(name, img_size=32)
    task = pretexts.create_pretext("colorization")
    sample = task(real_images[:4])

    loss = restoration_loss(restore(model, task, sample, steps=2), sample.target)
    loss.backward()
    grad = first_weight(model).grad
    assert grad is not None and grad.abs().sum() > 0, "the loss must reach the backbone's first layer"
    assert model.log_alpha.grad is not None and model.log_alpha.grad != 0

    model.zero_grad(set_to_none=True)
    loss = restoration_loss(restore(model, task, sample, steps=2, create_graph=False), sample.target)
    loss.backward()
    assert first_weight(model).grad is None, "without create_graph only alpha may train"
    assert model.log_alpha.grad is not None and model.log_alpha.grad != 0


def test_restore_returns_n_states_with_stop_gradient_between_steps(real_images):
    model = create_energy_model("resnet18")
    task = pretexts.create_pretext("colorization")
    sample = task(real_images[:2])
    states = restore(model, task, sample, steps=3)
    assert len(states) == 3
    assert all(s.shape == sample.state.shape for s in states)
    assert all(s.requires_grad for s in states)
    model.eval()
    with torch.no_grad():
        assert not any(s.requires_grad for s in restore(model, task, sample, steps=2))


def energy_descent_step(model, state: torch.Tensor) -> torch.Tensor:
    """One step down the energy, by hand: x - alpha * dE/dx(x), at a detached x (eq. 5)."""
    state = state.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(model.energy(state).sum(), state)
    return (state - model.alpha * grad).detach()


def test_each_restoration_step_descends_the_energy_from_the_previous_state(real_images):
    """x_1 = x_0 - alpha dE/dx(x_0) and x_2 = x_1 - alpha dE/dx(x_1), as the paper's eq. 5 writes them: each step
    goes down the energy (a small step lowers every image's energy) and starts where the step before it ended."""
    torch.manual_seed(0)
    model = create_energy_model("test_convnext", img_size=32).train()
    task = pretexts.prepare_task(pretexts.create_pretext("denoising"), model)
    sample = task(real_images[:4], torch.Generator().manual_seed(0))
    states = restore(model, task, sample, steps=2)

    first = energy_descent_step(model, sample.state)
    second = energy_descent_step(model, first)
    torch.testing.assert_close(states[0].detach(), first)
    torch.testing.assert_close(states[1].detach(), second)
    assert (states[1] - states[0]).abs().amax() > 1e-3, "the second step moves on from the first"
    with torch.no_grad():
        energies = [model.energy(x) for x in (sample.state, *states)]
    assert (energies[1] < energies[0]).all() and (energies[2] < energies[1]).all(), energies
    # stop-gradient between steps: the second state does not depend on the first through autograd
    assert torch.autograd.grad(states[1].sum(), states[0], allow_unused=True) == (None,)


def test_alpha_stays_positive_when_pushed_below_zero():
    model = create_energy_model("resnet18")
    opt = torch.optim.SGD([model.log_alpha], lr=10.0)
    for _ in range(200):
        opt.zero_grad()
        model.alpha.backward()  # d(alpha)/d(log_alpha) > 0: the step lowers alpha every time
        opt.step()
    assert model.alpha.item() > 0
    assert torch.isfinite(model.alpha)


def test_alpha_is_initialised_at_the_papers_value():
    assert create_energy_model("resnet18").alpha.item() == pytest.approx(0.1)


def test_energy_is_one_number_per_image(real_images):
    model = create_energy_model("vit_tiny", img_size=32)
    assert model.energy(real_images[:5]).shape == (5,)
    assert model.head.bias is None and model.head.out_features == 1


def test_aliases_and_timm_names_build():
    vit = backbones.create_backbone("vit_tiny")
    assert vit.patch_embed.patch_size == (4, 4) and vit.num_classes == 0
    assert backbones.create_backbone("resnet18", img_size=64).num_features == 512
    assert backbones.create_backbone("vit_small", img_size=32, patch_size=8).embed_dim == 384


def test_unknown_backbone_suggests_close_names():
    with pytest.raises(UnknownNameError, match="Did you mean: .*resnet18"):
        backbones.create_backbone("resnet_18")


def test_image_size_must_be_a_multiple_of_the_patch():
    with pytest.raises(ParameterError, match="not divisible by the patch size 4"):
        backbones.create_backbone("vit_tiny", img_size=30)


def test_uint8_images_are_scored_as_the_tasks_read_them():
    model = create_energy_model("test_convnext", img_size=32).eval()
    pixels = (torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8)
    torch.testing.assert_close(model.energy(pixels), model.energy(pixels.float() / 255))


def test_restore_says_what_to_pass_before_it_runs():
    model = create_energy_model("test_convnext", img_size=32).eval()
    task = pretexts.prepare_task(pretexts.create_pretext("random-mask"), model)
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    sample = task(images, torch.Generator().manual_seed(0))
    for steps in (-1, 1.5, "2", True):
        with pytest.raises(ParameterError, match="steps must be a whole number >= 0"):
            restore(model, task, sample, steps=steps)
    with pytest.raises(ParameterError, match="takes the task's corrupted sample"):
        restore(model, task, images, steps=1)
    with pytest.raises(ParameterError, match="takes an energy model and a task"):
        restore(task, model, sample, steps=1)
    with torch.inference_mode(), pytest.raises(ParameterError, match=r"under torch.no_grad\(\)"):
        restore(model, task, sample, steps=1)
    with torch.no_grad():
        assert len(restore(model, task, sample, steps=2)) == 2
