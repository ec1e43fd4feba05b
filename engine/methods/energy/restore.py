"""The method: N gradient steps down the energy, and the restoration loss (paper, eq. 5)."""

import torch
import torch.nn.functional as F
from torch import Tensor

from pretexts.base import Corrupted
from pretexts.engine.methods.energy.grad_modes import FD_DELTA, energy_gradient
from pretexts.engine.methods.states import state_adapter


def restore(
    model,
    task,
    sample: Corrupted,
    steps: int = 2,
    create_graph: bool | None = None,
    grad_mode: str = "exact",
    fd_delta: float = FD_DELTA,
) -> list[Tensor]:
    """Return the N restored states x_1..x_N, with x_j = SG(x_{j-1}) - alpha * dE/dx(SG(x_{j-1})) (none for N = 0).

    `create_graph` (default: whenever autograd is on and the model is in training mode) keeps the
    inner gradient differentiable, so the loss reaches the backbone through dE/dx (double
    backward). Without it only alpha receives a gradient. The inner gradient is taken with
    `torch.autograd.grad`, so DDP's all-reduce fires once, on the outer backward. `grad_mode`
    "finite-difference" replaces the double backward by two first-order passes (engine/methods/energy/grad_modes.py).
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if create_graph is None:
        create_graph = torch.is_grad_enabled() and model.training
    state = sample.state
    states = []
    energy = state_adapter(task, model).energy  # how the task's kind of state enters the model
    for _ in range(steps):
        state = state.detach().requires_grad_(True)  # SG between steps (paper, eq. 5)
        grad = energy_gradient(lambda s: energy(sample, s), state, model, grad_mode, create_graph, fd_delta)
        state = state - model.alpha.to(grad.dtype) * grad
        if not torch.is_grad_enabled():
            state = state.detach()
        states.append(state)
    return states


LOSSES = ("mse", "smooth_l1")


def restoration_loss(states: list[Tensor], target: Tensor, kind: str = "mse") -> Tensor:
    """Mean over steps of MSE (or SmoothL1 with beta 1, the appendix pseudo code) to the target."""
    if kind == "mse":
        losses = [F.mse_loss(s.float(), target.float()) for s in states]
    elif kind == "smooth_l1":
        losses = [F.smooth_l1_loss(s.float(), target.float(), beta=1.0) for s in states]
    else:
        raise ValueError(f"loss kind must be 'mse' or 'smooth_l1', got {kind!r}")
    return torch.stack(losses).mean()


def contrastive_loss(model, task, sample: Corrupted) -> Tensor:
    """The paper's N = 0 point (Appendix, Fig. A: "corrupted images as negative"): no restoration step; the
    energy of the clean image is pushed below the corrupted one's by the logistic form of eq. 3,
    softplus(E(x) - E(x_0)) = -log sigmoid(E(x_0) - E(x)).

    Its gradient is eq. 3's contrastive one (positives down, negatives up), weighted by sigmoid(E(x) - E(x_0)),
    i.e. by how wrongly the pair is ranked; unlike the raw difference E(x) - E(x_0) it is bounded below (by 0),
    so the model cannot lower it forever by scaling its energy up.
    """
    states = state_adapter(task, model)
    positive = states.energy(sample, sample.target)
    negative = states.energy(sample, sample.state)
    return F.softplus(positive.float() - negative.float()).mean()
