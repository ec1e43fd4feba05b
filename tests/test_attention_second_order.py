"""The attention candidates of benchmarks/attention_second_order.py compute what autograd's math attention computes:
a fused forward with a backward in differentiable ops has the same first and second derivatives, in float64."""

import importlib.util

import torch
from docs_blocks import ROOT

SPEC = importlib.util.spec_from_file_location("attention", ROOT / "benchmarks" / "attention_second_order.py")
attention = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(attention)


def qkv(seed=0, shape=(2, 3, 7, 4)):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, dtype=torch.double, generator=generator, requires_grad=True) for _ in range(3)]


def test_the_fused_forward_with_a_differentiable_backward_matches_math_attention():
    q, k, v = qkv()
    fused = attention._FusedAttention.apply
    torch.testing.assert_close(fused(q, k, v), attention.math_attention(q, k, v))
    # fast mode compares random projections of the Jacobians (seconds, not a minute); a wrong second order fails it
    assert torch.autograd.gradcheck(fused, (q, k, v), fast_mode=True)
    assert torch.autograd.gradgradcheck(fused, (q, k, v), fast_mode=True)


def test_the_energy_steps_gradients_agree_across_ways():
    torch.manual_seed(0)
    layer = attention.Layer(16, 2, attention.math_attention).double()
    x, r = torch.randn(2, 5, 16, dtype=torch.double), torch.randn(2, 5, 16, dtype=torch.double)
    expected = attention.eager_step(layer, x, r)
    assert all(torch.isfinite(g).all() for g in expected) and expected[0].abs().sum() > 0
    for way in (attention._FusedAttention.apply, attention.recomputed):
        layer.attend = way
        for got, want in zip(attention.eager_step(layer, x, r), expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    layer.attend = attention.math_attention
    compiled = attention.compiled_step(layer, "eager")(layer, x, r)
    for got, want in zip(compiled, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
