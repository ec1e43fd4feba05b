"""The method: N gradient steps down the energy, and the restoration loss (paper, eq. 5)."""
import torch
import torch.nn.functional as F
from torch import Tensor

from pretexts.base import Corrupted


def restore(model, task, sample: Corrupted, steps: int = 2, create_graph: bool | None = None) -> list[Tensor]:
    """Return the N restored states x_1..x_N, with x_j = SG(x_{j-1}) - alpha * dE/dx(SG(x_{j-1})).

    `create_graph` (default: whenever autograd is on and the model is in training mode) keeps the
    inner gradient differentiable, so the loss reaches the backbone through dE/dx (double
    backward). Without it only alpha receives a gradient. The inner gradient is taken with
    `torch.autograd.grad`, so DDP's all-reduce fires once, on the outer backward.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if create_graph is None:
        create_graph = torch.is_grad_enabled() and model.training
    state = sample.state
    states = []
    for _ in range(steps):
        state = state.detach().requires_grad_(True)  # SG between steps (paper, eq. 5)
        with torch.enable_grad():
            energy = task.energy(model, sample, state)
            (grad,) = torch.autograd.grad(energy.sum(), state, create_graph=create_graph)
        state = state - model.alpha.to(grad.dtype) * grad
        if not torch.is_grad_enabled():
            state = state.detach()
        states.append(state)
    return states


def restoration_loss(states: list[Tensor], target: Tensor, kind: str = "mse") -> Tensor:
    """Mean over steps of MSE (or SmoothL1 with beta 1, the appendix pseudo code) to the target."""
    if kind == "mse":
        losses = [F.mse_loss(s.float(), target.float()) for s in states]
    elif kind == "smooth_l1":
        losses = [F.smooth_l1_loss(s.float(), target.float(), beta=1.0) for s in states]
    else:
        raise ValueError(f"loss kind must be 'mse' or 'smooth_l1', got {kind!r}")
    return torch.stack(losses).mean()
