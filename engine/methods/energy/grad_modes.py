"""How a restoration step takes dE/dx, and how the loss reaches the backbone through it.

A step is x_j = x - alpha * g(theta, x) with g = dE/dx at the detached x = SG(x_{j-1}). With
w = dL/dg = -alpha * dL/dx_j, the loss reaches theta only through d/dtheta <w, g(theta, x)>: a
Hessian-vector product. The modes differ in how it is taken:

- "exact" (the paper): g is built with create_graph=True and the outer backward is a double backward.
- "finite-difference": g is a plain first-order gradient, and its backward is the central difference
      d/dtheta <w, dE/dx> = [dE/dtheta(x + eps w) - dE/dtheta(x - eps w)] / (2 eps) + O(eps^2),
  two ordinary forward/backward passes, so no kernel needs a double backward (fused attention,
  torch.compile). eps is per image, scaled to its w: eps_b * w_b has an RMS of `fd_delta` per element.
  The two passes run in float32 even under autocast: bf16 rounds activations to 2^-8, the same size
  as the difference being measured. The estimate needs a smooth energy: at a ReLU or max-pool kink
  dE/dtheta jumps, and the jumps the perturbation crosses do not vanish as eps -> 0 (ResNets fail).
  It needs per-image energies too: BatchNorm in training mode couples the images of a batch.
  alpha's gradient -<dL/dx_j, g> stays exact (it needs only g). Steps are independent (SG), so each
  step's loss term sends its own w through its own difference, all within one outer backward; the
  parameters receive their summed gradient once, which keeps DDP's all-reduce to one per step.
"""

import math
from contextlib import contextmanager

import torch
from timm.layers import LayerNorm2d
from torch import Tensor, nn

from pretexts.errors import ParameterError

GRAD_MODES = ("exact", "finite-difference")
# the finite-difference perturbation's RMS per element; images and position embeddings have RMS ~0.5. Smaller is
# more accurate in full float32 (O(delta^2) error), but a GPU's TF32 passes round at 1e-3 relative: 1e-2 keeps both
FD_DELTA = 1e-2
UNSUPPORTED = (
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.modules.batchnorm._BatchNorm,
)


def energy_gradient(
    energy, state: Tensor, model, mode: str = "exact", create_graph: bool = True, fd_delta: float = FD_DELTA
) -> Tensor:
    """dE/dx at `state` (a leaf that requires grad) for `energy`: state -> energies [B].

    With create_graph the result carries the loss back to the model's parameters in `mode`;
    without it (evaluation) both modes take the same first-order gradient.
    """
    if mode not in GRAD_MODES:
        raise ParameterError(f"grad mode must be one of {', '.join(GRAD_MODES)}; got {mode!r}.")
    if mode == "exact" or not create_graph:
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(energy(state).sum(), state, create_graph=create_graph)
        return grad
    params = [p for p in model.parameters() if p.requires_grad]
    return FiniteDifferenceGradient.apply(state, energy, fd_delta, *params)


class FiniteDifferenceGradient(torch.autograd.Function):
    """Forward: dE/dx (first order). Backward: the parameters' Hessian-vector product by central difference."""

    @staticmethod
    def forward(ctx, state, energy, fd_delta, *params):
        ctx.energy, ctx.fd_delta, ctx.params = energy, fd_delta, params
        ctx.rng = rng_state(state.device)  # the difference passes must draw the same dropout masks
        with torch.enable_grad():
            leaf = state.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(energy(leaf).sum(), leaf)
        ctx.save_for_backward(state.detach())
        return grad

    @staticmethod
    def backward(ctx, w):
        (state,) = ctx.saved_tensors
        wanted = [p for p, need in zip(ctx.params, ctx.needs_input_grad[3:]) if need]
        w = w.detach().float()
        eps = per_image_eps(w, ctx.fd_delta)
        total = None
        float32 = torch.autocast(state.device.type, enabled=False)
        for sign in (1.0, -1.0):
            with torch.enable_grad(), replayed_rng(ctx.rng, state.device), float32:
                energies = ctx.energy(state.float() + (sign * eps).view(-1, *[1] * (w.ndim - 1)) * w)
                grads = torch.autograd.grad(energies, wanted, grad_outputs=sign / (2 * eps), allow_unused=True)
            total = grads if total is None else [a if b is None else a + b for a, b in zip(total, grads)]
        total = iter(total)
        return (None, None, None, *[next(total) if need else None for need in ctx.needs_input_grad[3:]])


def per_image_eps(w: Tensor, fd_delta: float) -> Tensor:
    """eps_b with eps_b * w_b of RMS `fd_delta`: per image, so the estimate of an image does not depend on the
    rest of its batch (or on how DDP splits the batch); a tensor, not .item(), so the backward never waits."""
    norms = w.flatten(1).norm(dim=1).clamp_min(1e-30)
    return fd_delta * math.sqrt(w[0].numel()) / norms


def unsupported_layers(model: nn.Module) -> list[str]:
    """Names of the layers that make the finite-difference estimate wrong: kinks and batch coupling."""
    return [name for name, module in model.named_modules() if isinstance(module, UNSUPPORTED)]


def rng_state(device: torch.device) -> tuple:
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_rng_state(state: tuple, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


@contextmanager
def replayed_rng(saved: tuple, device: torch.device):
    """Run with the random state `saved`, then give the caller its own state back."""
    current = rng_state(device)
    set_rng_state(saved, device)
    try:
        yield
    finally:
        set_rng_state(current, device)


def refuse_cpu_fp16_double_backward(backbone: torch.nn.Module, amp: str, device: torch.device, name: str) -> None:
    """CPU autocast runs LayerNorm in float16 (CUDA's keeps it in float32), and the second derivative of timm's
    channels-first LayerNorm2d (ConvNeXt's) overflows float16 there: NaN on every batch tried, so a loss through
    dE/dx would skip every step. ViT's and Swin's token LayerNorms train in fp16 on the CPU (measured), so only a
    backbone with a LayerNorm2d is refused, before the run, where `amp` asks for fp16 on the CPU."""
    if amp != "fp16" or device.type != "cpu":
        return
    norm = next((layer for layer, module in backbone.named_modules() if isinstance(module, LayerNorm2d)), None)
    if norm is not None:
        raise ParameterError(
            f"--amp fp16 on the CPU cannot train the energy method on {name}: CPU autocast runs its channels-first "
            f"LayerNorm ({norm}) in float16, whose second derivative overflows to NaN; on the CPU use --amp bf16 or "
            "--amp off (or --grad-mode finite-difference)."
        )
