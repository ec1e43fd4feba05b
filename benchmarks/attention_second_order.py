"""What an attention layer's second order costs, by the ways that exist, before the package writes its own: one ViT
attention layer (timm's `Attention`) in the exact energy step's shape, x -> E = sum(attn(x) * r) -> g = dE/dx (with
a graph) -> L = mean(g^2) -> dL/dtheta, against a supervised step of the same layer (fused attention, one backward).

    python benchmarks/attention_second_order.py                              # ViT-S/16 at 224 px, batch 128, CUDA
    python benchmarks/attention_second_order.py --device cpu --batch 4 --tokens 65 --dim 192 --heads 3 --dtype fp32

Ways (rows; each checked against `math` on its gradients, the largest difference relative to their norm):
- `math`: the unfused attention the exact step runs today (fused kernels have no double backward).
- `math, compiled`: the same step through torch.func and torch.compile (inductor; `--compile-backend`), as the
  energy method's `--compile` builds it, its compile time printed.
- `fused forward, differentiable backward`: the forward on the fused kernel (scaled_dot_product_attention), its
  backward written in differentiable ops (softmax recomputed), so that the second backward runs matmuls and
  elementwise ops only.
- `math, recomputed`: math attention under activation checkpointing (its probabilities recomputed in the
  backward): what memory it saves, at what time.
- `flex attention`: torch's FlexAttention, compiled; reported as unsupported where it has no double backward.
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from timm.layers import Attention
from torch import nn
from torch.func import functional_call, grad
from torch.utils.checkpoint import checkpoint


class _FusedAttention(torch.autograd.Function):
    """softmax(q k^T s) v on the fused kernel; a backward in plain differentiable ops."""

    @staticmethod
    def forward(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs, output)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out = ctx.saved_tensors
        scale = q.shape[-1] ** -0.5
        probs = torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1)
        grad_v = probs.transpose(-2, -1) @ grad_out
        grad_probs = grad_out @ v.transpose(-2, -1)
        # softmax's backward: P * (dP - rowsum(dO * O)), as rowsum(P * dP) = rowsum(dO * O)
        grad_scores = probs * (grad_probs - (grad_out * out).sum(-1, keepdim=True))
        return grad_scores @ k * scale, grad_scores.transpose(-2, -1) @ q * scale, grad_v


class Layer(nn.Module):
    """timm's ViT attention with its q, k, v attention swapped for `attend(q, k, v)`."""

    def __init__(self, dim: int, heads: int, attend):
        super().__init__()
        self.attn, self.attend = Attention(dim, heads, qkv_bias=True), attend

    def forward(self, x):
        b, n, c = x.shape
        a = self.attn
        q, k, v = a.qkv(x).reshape(b, n, 3, a.num_heads, c // a.num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        return a.proj(self.attend(q, k, v).transpose(1, 2).reshape(b, n, c))


def math_attention(q, k, v):
    scale = q.shape[-1] ** -0.5
    return torch.softmax((q @ k.transpose(-2, -1)) * scale, dim=-1) @ v


def recomputed(q, k, v):
    """Math attention whose scores and probabilities are recomputed in the backward (torch.utils.checkpoint,
    non-reentrant, which keeps a graph for the double backward): less memory held, one more forward."""
    return checkpoint(math_attention, q, k, v, use_reentrant=False)


def flex(q, k, v):
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v)


def eager_step(layer: Layer, x, r) -> list[torch.Tensor]:
    x = x.detach().requires_grad_()
    energy = (layer(x) * r).sum()
    (g,) = torch.autograd.grad(energy, x, create_graph=True)
    params = list(layer.attn.parameters())  # the output projection's bias has no second-order gradient: zeros
    return torch.autograd.grad(g.float().square().mean(), params, allow_unused=True, materialize_grads=True)


def compiled_step(layer: Layer, backend: str):
    """The exact step as torch.func writes it (the inner gradient as ordinary ops), compiled whole."""
    names = [n for n, _ in layer.named_parameters()]

    def energy(params, x, r):
        return (functional_call(layer, params, (x,)) * r).sum()

    def loss(params, x, r):
        return grad(energy, argnums=1)(params, x, r).float().square().mean()

    step = torch.compile(grad(loss), backend=backend)

    def run(layer, x, r):
        grads = step(dict(layer.named_parameters()), x, r)
        return [grads[n] for n in names if n.startswith("attn.")]

    return run


def supervised_step(layer: Layer, x, r) -> list[torch.Tensor]:
    return torch.autograd.grad((layer(x) * r).sum(), list(layer.attn.parameters()))


def timed(fn, repeats: int, device) -> float:
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def peak_mib(fn, device) -> tuple[object, str]:
    """fn()'s result and the GPU memory it held at its peak above what was allocated before (CUDA only: '-')."""
    if device.type != "cuda":
        return fn(), "-"
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    resting = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return result, f"{(torch.cuda.max_memory_allocated() - resting) / 2**20:.0f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=197, help="197: ViT-S/16 at 224 px with its class token")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="autocast dtype (bf16) or none")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--compile-backend", default="inductor", help="eager: the code path without the compiler")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.tokens, args.dim, device=device)
    r = torch.randn_like(x)
    autocast = torch.autocast(device.type, torch.bfloat16, enabled=args.dtype == "bf16")
    base = Layer(args.dim, args.heads, math_attention).to(device)
    ways = {
        "math": (math_attention, eager_step),
        "math, compiled": (math_attention, compiled_step(base, args.compile_backend)),
        "fused forward, differentiable backward": (_FusedAttention.apply, eager_step),
        "math, recomputed": (recomputed, eager_step),
        "flex attention": (flex, compiled_step(base, args.compile_backend)),
    }
    print(
        f"one attention layer (dim {args.dim}, {args.heads} heads, {args.tokens} tokens), batch {args.batch}, "
        f"{args.dtype}, on {device}; median of {args.repeats} steps"
    )
    print("| step | ms | x supervised | peak MiB | first call s | gradient difference vs math |")
    print("|---|---|---|---|---|---|")
    with autocast:
        base.attend = F.scaled_dot_product_attention
        _, memory = peak_mib(lambda: supervised_step(base, x.detach().requires_grad_(), r), device)
        supervised = timed(lambda: supervised_step(base, x.detach().requires_grad_(), r), args.repeats, device)
        print(f"| supervised (fused attention) | {supervised:.2f} | 1.00 | {memory} | | |")
        reference = None
        for name, (attend, step) in ways.items():
            base.attend = attend
            try:
                start = time.perf_counter()
                grads = step(base, x, r)  # the first call: a compiled way's compile
                first = time.perf_counter() - start
                grads, memory = peak_mib(lambda: step(base, x, r), device)  # noqa: B023 (called at once)
                ms = timed(lambda: step(base, x, r), args.repeats, device)  # noqa: B023 (called at once)
            except Exception as err:  # an attention with no double backward, a compiler that refuses it
                print(f"| {name} | unsupported: {type(err).__name__}: {' '.join(str(err).split())[:120]} | | | | |")
                continue
            reference = reference or grads
            diff = max(((g - e).norm() / e.norm().clamp_min(1e-30)).item() for g, e in zip(grads, reference))
            print(f"| {name} | {ms:.2f} | {ms / supervised:.2f} | {memory} | {first:.1f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
