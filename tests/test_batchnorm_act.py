"""timm's BatchNormAct2d (EfficientNet, RegNet, ByobNet, CoAtNet, MaxViT) rewritten like nn.BatchNorm2d: the same
outputs, running statistics and first and second derivatives as timm's own module in float64, its activation and
drop layer applied after the rewritten batch norm."""

import pytest
import torch
from timm.layers import BatchNormAct2d
from torch import nn

from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.modules.second_order import restore_double_backward, rewrite_double_backward
from pretexts.engine.modules.second_order_norm import SecondOrderBatchNormAct2d

ACTIVATIONS = [nn.ReLU, nn.SiLU, nn.Identity]


def pair(act_layer, momentum=0.1, channels=6):
    """(timm's BatchNormAct2d, the same module rewritten), float64, equal random affine weights."""
    torch.manual_seed(0)
    timm_norm = BatchNormAct2d(channels, momentum=momentum, act_layer=act_layer).double()
    nn.init.normal_(timm_norm.weight), nn.init.normal_(timm_norm.bias)
    rewritten = BatchNormAct2d(channels, momentum=momentum, act_layer=act_layer).double()
    rewritten.load_state_dict(timm_norm.state_dict())
    assert rewrite_double_backward(rewritten) == 1 and type(rewritten) is SecondOrderBatchNormAct2d
    return timm_norm, rewritten


def images(shape=(8, 6, 5, 5), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, dtype=torch.double, generator=generator) * 3 + 2).requires_grad_()


def energy_gradients(module, x, weights):
    """An energy step's shape: E's image gradient with a graph, then a loss of it differentiated to everything."""
    energy = (module(x) * weights).square().sum()
    (image_grad,) = torch.autograd.grad(energy, x, create_graph=True)
    loss = image_grad.square().sum() + (image_grad * weights).sum()
    return torch.autograd.grad(loss, [x, *module.parameters()])


@pytest.mark.parametrize("act_layer", ACTIVATIONS, ids=lambda a: a.__name__)
def test_outputs_and_double_backward_equal_timms_in_float64(act_layer):
    timm_norm, rewritten = pair(act_layer)
    x = images()
    weights = torch.randn(x.shape, dtype=torch.double, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(rewritten(x), timm_norm(x), rtol=0, atol=0)
    expected = energy_gradients(timm_norm, x, weights)
    for got, want in zip(energy_gradients(rewritten, x, weights), expected, strict=True):
        assert want.abs().sum() > 0
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_gradcheck_and_gradgradcheck():
    _, rewritten = pair(nn.SiLU, channels=3)  # smooth: finite differences need no kink-free luck
    x = images((4, 3, 3, 3))
    assert torch.autograd.gradcheck(rewritten, (x,))
    assert torch.autograd.gradgradcheck(rewritten, (x,))


@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
def test_running_statistics_eval_and_keys_equal_timms(momentum):
    timm_norm, rewritten = pair(nn.ReLU, momentum)
    x = images()
    for step in range(3):
        torch.testing.assert_close(rewritten(x * (step + 1)), timm_norm(x * (step + 1)), rtol=0, atol=0)
    for name, buffer in timm_norm.named_buffers():
        torch.testing.assert_close(rewritten.get_buffer(name), buffer, rtol=0, atol=0)
    rewritten.eval(), timm_norm.eval()
    torch.testing.assert_close(rewritten(x), timm_norm(x), rtol=0, atol=0)
    assert list(rewritten.state_dict()) == list(timm_norm.state_dict())
    assert restore_double_backward(rewritten) == 1 and type(rewritten) is BatchNormAct2d


def test_a_batchnorm_act_backbone_is_rewritten_with_the_same_gradients():
    torch.manual_seed(0)
    model = create_energy_model("test_efficientnet", img_size=32).double().train()
    norms = [m for m in model.backbone.modules() if type(m) is BatchNormAct2d]
    x = images((2, 3, 32, 32)).detach()

    def step_grads():
        state = x.clone().requires_grad_()
        (grad,) = torch.autograd.grad(model.energy(state).sum(), state, create_graph=True)
        return torch.autograd.grad(grad.square().sum(), list(model.backbone.parameters()), materialize_grads=True)

    expected = step_grads()
    assert rewrite_double_backward(model.backbone, frozenset({"batchnorm"})) == len(norms) > 0
    assert all(type(m) is SecondOrderBatchNormAct2d for m in norms)
    got, want = (torch.cat([g.flatten() for g in grads]) for grads in (step_grads(), expected))
    assert want.norm() > 0
    assert (got - want).norm() / want.norm() < 1e-10  # a bias before another BatchNorm: 1e-15 either way, not compared
