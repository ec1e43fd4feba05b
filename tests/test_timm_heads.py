"""Backbones whose pooled features are wider than their last stage: timm's pre-logits layer (MobileNetV3/V4,
GhostNet, MambaOut, HGNetV2, EfficientViT) makes `forward_head(pre_logits=True)` `head_hidden_size` wide. MobileNetV3
and GhostNet also gate with `nn.Hardsigmoid`, which has no double backward in torch."""

import pytest
import timm
import torch

import pretexts
from pretexts.backbones.factory import pooled_width
from pretexts.engine import restoration_loss, restore
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.modules.second_order import TwiceDifferentiableHardsigmoid


@pytest.mark.parametrize("name", ["mobilenetv3_small_050", "mambaout_femto", "test_convnext"])
def test_pooled_width_is_what_the_backbone_returns(name):
    with torch.device("meta"):  # no weights allocated: only the widths matter
        backbone = timm.create_model(name, num_classes=0)
        pooled = backbone(torch.empty(1, 3, 64, 64))
    assert pooled_width(backbone) == pooled.shape[1]


@pytest.mark.parametrize("name", ["test_mambaout", "mobilenetv3_small_050"])
def test_energy_step_runs_on_a_backbone_with_a_pre_logits_layer(name, real_images):
    torch.manual_seed(0)
    model = create_energy_model(name, img_size=32)  # test_mambaout: 64 channels, pooled to 256 by its head's fc
    assert model.backbone.num_features != model.backbone.head_hidden_size
    task = pretexts.create_pretext("random-mask")
    sample = task(real_images[:2])
    restoration_loss(restore(model, task, sample, steps=1), sample.target).backward()
    assert model.head.weight.shape == (1, model.backbone.head_hidden_size)
    assert all(p.grad is not None for p in model.head.parameters())
    assert model.log_alpha.grad is not None and torch.isfinite(model.log_alpha.grad)


def test_hardsigmoid_swap_keeps_values_and_gradient_and_has_a_second_derivative():
    x = (torch.linspace(-4, 4, 17, dtype=torch.float64) + 0.01).requires_grad_(True)  # both flat ends and the slope
    swapped = TwiceDifferentiableHardsigmoid()
    expected = torch.nn.Hardsigmoid()(x)
    torch.testing.assert_close(swapped(x), expected, rtol=0, atol=0)
    (grad,) = torch.autograd.grad(swapped(x).sum(), x)
    slope = torch.autograd.grad(expected.sum(), x)[0]
    torch.testing.assert_close(grad, slope, rtol=1e-7, atol=0)  # torch's backward takes 1/6 in float32
    assert torch.autograd.gradgradcheck(lambda t: swapped(t) * t, (x,))  # the energy's shape: a gate times a value
