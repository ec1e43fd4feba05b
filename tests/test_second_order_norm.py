"""The rewritten BatchNorm (engine/modules/second_order_norm.py): the same outputs, running statistics and first
and second derivatives as torch's own batch norm, in float64, for every configuration a backbone builds; its own
derivatives checked against finite differences."""

import pytest
import torch
from torch import nn

from pretexts.engine.modules.second_order import restore_double_backward, rewrite_double_backward
from pretexts.engine.modules.second_order_norm import SecondOrderBatchNorm2d, _BatchNorm


def inputs(affine=True, shape=(3, 4, 5, 5), seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, dtype=torch.double, generator=generator) * 3 + 2).requires_grad_()
    if not affine:
        return x, None, None
    w = torch.randn(shape[1], dtype=torch.double, generator=generator, requires_grad=True)
    b = torch.randn(shape[1], dtype=torch.double, generator=generator, requires_grad=True)
    return x, w, b


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-affine"])
@pytest.mark.parametrize("shape", [(3, 4, 5, 5), (2, 3, 1, 7), (5, 2, 2, 2)], ids=lambda s: "x".join(map(str, s)))
def test_first_and_second_derivatives_match_finite_differences(affine, shape):
    x, w, b = inputs(affine, shape)
    args = tuple(t for t in (x, w, b) if t is not None)

    def norm(x, w=None, b=None):
        return _BatchNorm.apply(x, w, b, None, None, 0.1, 1e-5)[0]

    expected = nn.functional.batch_norm(x, None, None, w, b, True, 0.1, 1e-5)
    torch.testing.assert_close(norm(*args), expected, rtol=0, atol=0)
    # fast mode compares random projections of the Jacobians (seconds, not a minute); a wrong second order fails it
    assert torch.autograd.gradcheck(norm, args, fast_mode=True)
    assert torch.autograd.gradgradcheck(norm, args, fast_mode=True)


def energy_gradients(module, x, weights):
    """An energy step's shape: E's image gradient with a graph, then a loss of it differentiated to everything."""
    energy = (module(x) * weights).square().sum()
    (image_grad,) = torch.autograd.grad(energy, x, create_graph=True)
    loss = image_grad.square().sum() + (image_grad * weights).sum()
    return torch.autograd.grad(loss, [x, *module.parameters()])


def test_the_double_backward_equals_autograds_in_float64():
    x, _, _ = inputs(shape=(8, 6, 7, 7))
    weights = torch.randn(x.shape, dtype=torch.double, generator=torch.Generator().manual_seed(1))
    torch_norm = nn.BatchNorm2d(6).double()
    nn.init.normal_(torch_norm.weight), nn.init.normal_(torch_norm.bias)
    rewritten = nn.BatchNorm2d(6).double()
    rewritten.load_state_dict(torch_norm.state_dict())
    assert rewrite_double_backward(rewritten) == 1 and type(rewritten) is SecondOrderBatchNorm2d
    expected = energy_gradients(torch_norm, x, weights)
    for got, want in zip(energy_gradients(rewritten, x, weights), expected, strict=True):
        assert want.abs().sum() > 0
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
def test_running_statistics_and_eval_match_torchs(momentum):
    x, _, _ = inputs()
    torch_norm, rewritten = nn.BatchNorm2d(4, momentum=momentum).double(), nn.BatchNorm2d(4, momentum=momentum)
    rewritten = rewritten.double()
    rewrite_double_backward(rewritten)
    for step in range(3):
        batch = x * (step + 1)
        torch.testing.assert_close(rewritten(batch), torch_norm(batch), rtol=0, atol=0)
    for name, buffer in torch_norm.named_buffers():
        torch.testing.assert_close(rewritten.get_buffer(name), buffer, rtol=0, atol=0)
    rewritten.eval(), torch_norm.eval()
    torch.testing.assert_close(rewritten(x), torch_norm(x), rtol=0, atol=0)
    assert list(rewritten.state_dict()) == list(torch_norm.state_dict())
    assert restore_double_backward(rewritten) == 1 and type(rewritten) is nn.BatchNorm2d


def test_bf16_autocast_keeps_each_gradient_in_its_inputs_dtype():
    norm = nn.BatchNorm2d(4)
    rewrite_double_backward(norm)
    x = torch.randn(8, 4, 6, 6, requires_grad=True)
    with torch.autocast("cpu", torch.bfloat16):
        out = norm(x.bfloat16())
        (image_grad,) = torch.autograd.grad(out.float().square().sum(), x, create_graph=True)
    image_grad.square().sum().backward()
    assert out.dtype == torch.bfloat16 and image_grad.dtype == torch.float32
    assert norm.weight.grad.dtype == torch.float32 and torch.isfinite(norm.weight.grad).all()
    assert x.grad.dtype == torch.float32 and x.grad.abs().sum() > 0
