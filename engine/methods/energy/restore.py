"""The method: N gradient steps down the energy, and the restoration loss (paper, eq. 5)."""

import torch
import torch.nn.functional as F
from torch import Tensor

from pretexts.base import Corrupted, Pretext
from pretexts.engine.methods.energy.grad_modes import FD_DELTA, energy_gradient
from pretexts.engine.methods.states import StateAdapter, state_adapter
from pretexts.errors import ParameterError


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

    Args:
        model (EnergyModel): The energy model (`create_energy_model`): its `energy` and `alpha`.
        task (Pretext): The task that made `sample`, prepared for the model (`prepare_task`, before it corrupts);
            its `state_kind` says how the state enters the model (pixels: as images; patch sorting's positions: as
            the ViT's position embeddings).
        sample: The corrupted batch; `sample.state` is x_0.
        steps: N, the gradient steps (paper: "we adopt N = 2", Section 4; Appendix B.1: fairly well with one).
            0 restores nothing (the N = 0 method trains by `contrastive_loss` instead).
        create_graph: Keep the inner gradient's graph, so the loss reaches the backbone; None: whenever autograd
            is on and the model is training.
        grad_mode: "exact" (the double backward, the paper's) or "finite-difference".
        fd_delta: The finite-difference perturbation (RMS per element), in that mode: in [1e-6, 1].

    Returns:
        The states x_1..x_N, each shaped as `sample.state`.

    Raises:
        ParameterError: `steps` is no whole number >= 0, `fd_delta` is outside [1e-6, 1], the arguments are not
            a model, a task and its sample, it runs under inference mode, no model side takes the task's
            `state_kind`, or the task corrupted for another model (not given to `prepare_task(task, model)` before
            `task(images)`).

    Shape:
        - sample.state: `(B, 3, H, W)` float for pixel tasks (patch sorting: `(B, L, D)`).
        - Returns: N tensors of the shape of `sample.state`.

    Examples:
        >>> import torch
        >>> from pretexts import create_pretext
        >>> from pretexts.engine import create_energy_model, prepare_task, restoration_loss, restore
        >>> model = create_energy_model("vit_tiny", img_size=32, depth=2, patch_size=8).train()
        >>> task = prepare_task(create_pretext("gridded-mask"), model)  # what the task reads from the model
        >>> sample = task(torch.rand(4, 3, 32, 32), torch.Generator().manual_seed(0))
        >>> states = restore(model, task, sample, steps=2)
        >>> len(states), states[-1].shape
        (2, torch.Size([4, 3, 32, 32]))
        >>> restoration_loss(states, sample.target).backward()
        >>> bool(model.backbone.patch_embed.proj.weight.grad.abs().sum() > 0)  # reached through dE/dx
        True
    """
    check_restore_inputs(model, task, sample, steps)
    fd_delta = checked_fd_delta(fd_delta)
    if create_graph is None:
        create_graph = torch.is_grad_enabled() and model.training
    state = sample.state
    states = []
    energy = prepared_adapter(model, task, "restore").energy  # how the task's kind of state enters the model
    for _ in range(steps):
        state = state.detach().requires_grad_(True)  # SG between steps (paper, eq. 5)
        grad = energy_gradient(lambda s: energy(sample, s), state, model, grad_mode, create_graph, fd_delta)
        state = state - model.alpha.to(grad.dtype) * grad
        if not torch.is_grad_enabled():
            state = state.detach()
        states.append(state)
    return states


def check_restore_inputs(model, task, sample, steps) -> None:
    """What `restore` is given, checked before any of it runs: a ParameterError saying what to pass."""
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ParameterError(f"steps must be a whole number >= 0, got {steps!r}.")
    if not isinstance(model, torch.nn.Module) or not isinstance(task, Pretext):
        raise ParameterError(
            f"restore(model, task, sample, ...) takes an energy model and a task, got a {type(model).__name__} and "
            f"a {type(task).__name__}."
        )
    if not isinstance(sample, Corrupted):
        raise ParameterError(
            f"restore takes the task's corrupted sample, sample = task(images, generator), got a "
            f"{type(sample).__name__}."
        )
    if torch.is_inference_mode_enabled():
        raise ParameterError(
            "restore descends the energy's gradient, which inference mode forbids: run it under torch.no_grad() "
            "(it enables gradients where it needs them), not torch.inference_mode()."
        )


def checked_fd_delta(fd_delta) -> float:
    """`fd_delta` in the range `--fd-delta` declares: 0, a negative or NaN one gives NaN gradients, not an error."""
    from pretexts.engine.methods.energy.params import ENERGY_PARAMS  # here: that module imports this one

    return ENERGY_PARAMS["fd_delta"].convert("restore", "fd_delta", fd_delta)


def prepared_adapter(model, task, caller: str) -> StateAdapter:
    """The task's state adapter for `model`, or a ParameterError where the task corrupts for another model: its
    sample would not be what `pretexts train` restores (a gray mask box on the normalisation mean, say)."""
    adapter = state_adapter(task, model)
    problem = adapter.unprepared()
    if problem is not None:
        raise ParameterError(
            f"{caller}: task '{task.name}' corrupted for another model ({problem}); prepare the task for the model "
            f"before it corrupts, as pretexts train does: task = prepare_task(task, model), then sample = task(images)."
        )
    return adapter


LOSSES = ("mse", "smooth_l1")
PATCH_CENTRED = "patch-centred"  # the energy method's only: a colour shift of a patch earns nothing


def patch_centred(error: Tensor, patch: int) -> Tensor:
    """`error` [B, C, H, W] less its mean over each `patch` x `patch` cell, per channel: what is left once a
    patch's colour is right (MAE's per-patch normalised targets drop the same, and the scale too)."""
    if error.ndim != 4 or error.shape[-2] % patch or error.shape[-1] % patch:
        raise ParameterError(
            f"the patch-centred loss needs images [B, C, H, W] whose sides divide into {patch}-pixel patches, "
            f"got {tuple(error.shape)}; give patch=N (loss_patch=N) with N dividing the image size."
        )
    means = F.avg_pool2d(error, patch)
    return error - means.repeat_interleave(patch, -2).repeat_interleave(patch, -1)


def restoration_loss(states: list[Tensor], target: Tensor, kind: str = "mse", patch: int | None = None) -> Tensor:
    """Mean over steps of MSE (or SmoothL1 with beta 1, the appendix pseudo code) to the target.

    Eq. 5 of the paper: L = 1/(KN) sum_i sum_j MSE(x_i^j, x_i), the mean over the N restored states of each one's
    error to the clean target.

    Args:
        states: The restored states x_1..x_N, as `restore` returns them: at least one (N = 0 restores nothing; it
            trains by `contrastive_loss` instead).
        target: What they must reach (`sample.target`).
        kind: "mse" (eq. 5), "smooth_l1" (SmoothL1Loss with beta 1.0, the appendix's pseudo code) or
            "patch-centred" (the MSE of the error less its mean over each `patch`-pixel cell: a restoration earns
            nothing by moving a patch's colour, only by restoring what varies inside it). `pretexts train`'s default
            (loss auto) is "patch-centred" with the ViT's patch for a ViT restoring a mask, else "mse";
            `load_energy_run(checkpoint).loss` is what a run trained with.
        patch: The cell's side in pixels, for "patch-centred".

    Returns:
        The scalar loss, in float32 whatever the states' dtype.

    Raises:
        ParameterError: No state (N = 0), one tensor instead of a list, a state not shaped as the target, an unknown
            `kind`, or "patch-centred" without a `patch` that divides the image.

    Shape:
        - states: N tensors of the shape of `target`, e.g. `(B, 3, H, W)`.
        - Returns: `()`.

    Examples:
        >>> import torch
        >>> from pretexts.engine import restoration_loss
        >>> target = torch.zeros(2, 3, 4, 4)
        >>> states = [torch.full_like(target, 0.5), torch.full_like(target, 0.1)]
        >>> restoration_loss(states, target)  # (0.5^2 + 0.1^2) / 2
        tensor(0.1300)
        >>> restoration_loss(states, target, kind="smooth_l1")  # 0.5 x^2 below beta = 1
        tensor(0.0650)
        >>> restoration_loss(states, target, kind="patch-centred", patch=2)  # a uniform error is a colour shift
        tensor(0.)
    """
    check_states(states, target)
    if not states:
        raise ParameterError(
            "restoration_loss takes at least one restored state, got none: restore with steps >= 1 (N = 0 restores "
            "nothing; its loss is contrastive_loss(model, task, sample))."
        )
    if kind == "mse":
        losses = [F.mse_loss(s.float(), target.float()) for s in states]
    elif kind == "smooth_l1":
        losses = [F.smooth_l1_loss(s.float(), target.float(), beta=1.0) for s in states]
    elif kind == PATCH_CENTRED and patch:
        losses = [patch_centred(s.float() - target.float(), patch).square().mean() for s in states]
    else:
        raise ParameterError(
            f"loss kind must be 'mse', 'smooth_l1' or 'patch-centred' with a patch (patch=N pixels), got {kind!r}."
        )
    return torch.stack(losses).mean()


def check_states(states, target) -> None:
    """`restoration_loss`'s inputs: a list of states, each shaped as the target (torch would broadcast others)."""
    if isinstance(states, Tensor):
        raise ParameterError(
            f"restoration_loss takes the list of states restore returns, got one tensor {tuple(states.shape)}; "
            f"pass [state] for a single state."
        )
    if not isinstance(target, Tensor):
        raise ParameterError(
            f"restoration_loss takes the target as a tensor (sample.target), got a {type(target).__name__}."
        )
    for step, state in enumerate(states, 1):
        if not isinstance(state, Tensor) or state.shape != target.shape:
            got = tuple(state.shape) if isinstance(state, Tensor) else f"a {type(state).__name__}"
            raise ParameterError(
                f"restoration_loss: state {step} is {got}, the target {tuple(target.shape)}; pass the states restore "
                f"returns for the sample whose target this is."
            )


def contrastive_loss(model, task, sample: Corrupted) -> Tensor:
    """The paper's N = 0 point (Appendix, Fig. A: "corrupted images as negative"): no restoration step; the
    energy of the clean image is pushed below the corrupted one's by the logistic form of eq. 3,
    softplus(E(x) - E(x_0)) = -log sigmoid(E(x_0) - E(x)).

    Its gradient is eq. 3's contrastive one (positives down, negatives up), weighted by sigmoid(E(x) - E(x_0)),
    i.e. by how wrongly the pair is ranked; unlike the raw difference E(x) - E(x_0) it is bounded below (by 0),
    so the model cannot lower it forever by scaling its energy up.
    """
    states = prepared_adapter(model, task, "contrastive_loss")
    positive = states.energy(sample, sample.target)
    negative = states.energy(sample, sample.state)
    return F.softplus(positive.float() - negative.float()).mean()
