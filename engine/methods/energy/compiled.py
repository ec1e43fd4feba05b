"""`--compile` for the energy method: one restoration step, x - alpha * dE/dx, written with torch.func and
compiled whole.

torch.compile has no double backward through a module's autograd graph, but a step written functionally,
`torch.func.grad` of the energy over `torch.func.functional_call`, is traced with its inner gradient as
ordinary ops, so AOTAutograd differentiates it once more for the outer backward: the exact mode keeps its
exact gradient. The finite-difference mode compiles its two kinds of passes (dE/dx forward; the pair of
dE/dtheta passes of its backward, engine/methods/energy/grad_modes.py) the same way. A step that does not
compile says so in one line and the run goes on eagerly (`restore`); so does a backbone with BatchNorm in training
mode, before any trace: torch.func refuses its in-place running-statistic updates.
"""

import sys

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad

from pretexts.backbones.factory import running_stat_norms
from pretexts.engine.methods.base import first_line
from pretexts.engine.methods.energy.grad_modes import per_image_eps
from pretexts.engine.methods.states import state_adapter


class StateEnergy(nn.Module):
    """energy(sample, state) of a task's kind of state as a module, so `functional_call` can swap its weights."""

    def __init__(self, model: nn.Module, task):
        super().__init__()
        self.model = model
        self.adapter = state_adapter(task, model)

    def forward(self, state: Tensor, sample) -> Tensor:
        return self.adapter.energy(sample, state)


def has_dropout(model: nn.Module) -> bool:
    """Dropout or drop-path that draws masks: inductor's own RNG cannot replay them in the difference passes."""
    return any(
        (isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0) or getattr(m, "drop_prob", 0) > 0
        for m in model.modules()
    )


class CompiledRestore:
    """The training restoration steps of one model, compiled; `None` from `__call__` means: run eagerly."""

    def __init__(self, model: nn.Module, backend: str, grad_mode: str, fd_delta: float, name: str):
        self.model, self.backend, self.grad_mode, self.fd_delta, self.name = model, backend, grad_mode, fd_delta, name
        self.task = None
        self.failed = grad_mode == "finite-difference" and has_dropout(model)
        if self.failed:
            note(
                f"--compile: backbone '{name}' has dropout, whose masks the compiled finite-difference passes "
                f"cannot replay; the restoration step runs eagerly."
            )
        elif running_stat_norms(model):  # training steps only: a trace bound to fail, skipped
            self.failed = True
            note(
                f"--compile: backbone '{name}' has BatchNorm, whose running-statistic updates torch.func refuses "
                f"inside the restoration step's gradient; the restoration step runs eagerly."
            )

    def bind(self, task) -> None:
        """Build the compiled functions for `task`'s kind of state (again when the task changes)."""
        if task is self.task:
            return
        self.task = task
        energy = StateEnergy(self.model, task)

        def total(params: dict, state: Tensor, sample, weight=None) -> Tensor:
            energies = functional_call(energy, params, (state, sample))
            return energies.sum() if weight is None else (energies * weight).sum()

        def exact_step(params, state, sample):
            dx = grad(total, argnums=1)(params, state, sample)
            return state - params["model.log_alpha"].exp().to(dx.dtype) * dx

        def first_order(params, state, sample):
            return grad(total, argnums=1)(params, state, sample)

        def difference(params, state, w, eps, sample):
            # the central difference of dE/dtheta along w: both passes in float32 (grad_modes.py says why)
            shape = (-1, *[1] * (w.ndim - 1))
            with torch.autocast(state.device.type, enabled=False):
                plus = grad(total)(params, state.float() + eps.view(shape) * w, sample, 1 / (2 * eps))
                minus = grad(total)(params, state.float() - eps.view(shape) * w, sample, -1 / (2 * eps))
            return {k: plus[k] + minus[k] for k in plus}

        compile_ = lambda fn: torch.compile(fn, backend=self.backend)  # noqa: E731
        self.exact_step = compile_(exact_step)
        self.first_order, self.difference = compile_(first_order), compile_(difference)

    def params(self) -> dict:
        return {f"model.{k}": v for k, v in self.model.named_parameters()}

    def __call__(self, task, sample, steps: int) -> list[Tensor] | None:
        """The N restored states of a training step, or None where the step did not compile."""
        if self.failed:
            return None
        self.bind(task)
        try:  # lower the backward now too, so a backward that cannot compile fails here, not in loss.backward()
            with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
                return self.states(sample, steps)
        except Exception as err:  # noqa: BLE001 - any compiler failure: one line, then eager
            self.failed = True
            note(
                f"--compile: the restoration step of backbone '{self.name}' did not compile ({first_line(err)}); "
                f"it runs eagerly."
            )
            return None

    def states(self, sample, steps: int) -> list[Tensor]:
        params, state, states = self.params(), sample.state, []
        for _ in range(steps):
            state = state.detach()  # SG between steps (paper, eq. 5)
            if self.grad_mode == "exact":
                state = self.exact_step(params, state, sample)
            else:
                dx = CompiledFiniteDifference.apply(state, self, sample, *params.values())
                state = state - self.model.alpha.to(dx.dtype) * dx
            states.append(state)
        return states


class CompiledFiniteDifference(torch.autograd.Function):
    """`FiniteDifferenceGradient` with compiled passes: forward dE/dx, backward the parameters' central difference."""

    @staticmethod
    def forward(ctx, state, restore: CompiledRestore, sample, *params):
        ctx.restore, ctx.sample = restore, sample
        ctx.save_for_backward(state.detach())
        return restore.first_order(restore.params(), state.detach(), sample)

    @staticmethod
    def backward(ctx, w):
        (state,) = ctx.saved_tensors
        restore = ctx.restore
        w = w.detach().float()
        grads = restore.difference(restore.params(), state, w, per_image_eps(w, restore.fd_delta), ctx.sample)
        wanted = ctx.needs_input_grad[3:]
        return (None, None, None, *[g if need else None for g, need in zip(grads.values(), wanted)])


def note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
