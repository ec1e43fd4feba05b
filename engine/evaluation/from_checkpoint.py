"""Rebuild the energy model and its task from a pretraining checkpoint."""

from dataclasses import dataclass

from torch import Tensor

import pretexts
from pretexts.base import Corrupted, Pretext
from pretexts.engine.methods.energy import EnergyMethod
from pretexts.engine.methods.energy.method import energy_model_for, loss_patch
from pretexts.engine.methods.energy.model import EnergyModel
from pretexts.engine.methods.energy.params import AUTO_LOSS
from pretexts.engine.methods.energy.restore import restoration_loss, restore
from pretexts.engine.methods.states import state_adapter
from pretexts.engine.training.checkpoint import load_checkpoint, load_weights
from pretexts.engine.training.config import PretrainConfig
from pretexts.errors import CheckpointError


def load_energy_model(path, device="cpu"):
    """(EnergyModel in eval mode on `device`, the run's PretrainConfig) from a checkpoint.pt; the energy
    method's arguments (steps, alpha, ...) as it reads them are `EnergyMethod.parse_args(cfg)`."""
    ckpt = load_checkpoint(path, kinds=("pretrain",))
    cfg = PretrainConfig.from_dict(ckpt["config"])
    if cfg.method != "energy":
        raise CheckpointError(
            f"checkpoint '{path}' was trained with --method {cfg.method} and holds no energy "
            f"model; give a checkpoint of `pretexts train` (--method energy)."
        )
    args = EnergyMethod.parse_args(cfg)
    model = energy_model_for(cfg, args)
    load_weights(
        model,
        ckpt["model"],
        path,
        f"a {cfg.backbone} energy model",
        "was it written by another version, or its config edited?",
    )
    return model.to(device).eval(), cfg


def task_for(cfg: PretrainConfig, name: str | None = None, task_args: dict | None = None, model=None):
    """The task `name` with `task_args`, prepared for `model` when given (its state adapter). Without a name it is
    the run's own task, its recorded arguments with `task_args` over them: `--task-arg fill=black` changes the fill
    of the task the checkpoint trained on and keeps the rest as it trained."""
    args = dict(task_args or {}) if name else {**cfg.task_args, **(task_args or {})}
    task = pretexts.create_pretext(name or cfg.task, **args)
    return state_adapter(task, model).prepare() if model is not None else task


@dataclass(frozen=True)
class EnergyRun:
    """A trained energy model with what its run restored with: its task (prepared), N, the gradient mode and the
    loss, each as `pretexts train` resolved it (`load_energy_run`)."""

    model: EnergyModel  # in eval mode; `.train()` for restoration in training mode
    task: Pretext  # the run's task with its recorded arguments, prepared for `model`
    config: PretrainConfig  # the run's settings, with what auto resolved to
    steps: int  # N
    grad_mode: str
    fd_delta: float
    loss: str  # "mse", "smooth_l1" or "patch-centred" (auto resolved)
    loss_patch: int | None  # the patch-centred loss's patch in pixels, None for the other losses

    def restore(self, sample: Corrupted, steps: int | None = None) -> list[Tensor]:
        """`restore(model, task, sample)` with the run's N (or `steps`) and gradient mode."""
        steps = self.steps if steps is None else steps
        return restore(self.model, self.task, sample, steps, grad_mode=self.grad_mode, fd_delta=self.fd_delta)

    def restoration_loss(self, states: list[Tensor], target: Tensor) -> Tensor:
        """`restoration_loss` of restored states with the loss the run trained with (its patch too)."""
        return restoration_loss(states, target, self.loss, self.loss_patch)


def load_energy_run(checkpoint, device="cpu") -> EnergyRun:
    """A `pretexts train` run (`--method energy`) rebuilt from its checkpoint.pt, to restore images with it in Python.

    The model is rebuilt as the run built it (backbone, image size, positions, pooling, head) with its trained
    weights, in eval mode on `device`; the task is the run's own with its recorded arguments, prepared for the model
    (`prepare_task`); N, the gradient mode and the loss are the run's. `run.task(images, generator)` corrupts as the
    run did, `run.restore(sample)` restores and `run.restoration_loss(states, sample.target)` scores, as a training
    step does (`pretexts restore` draws the same restorations). Another task: `prepare_task(create_pretext(...),
    run.model)`.

    Args:
        checkpoint (str | Path): The checkpoint.pt a `pretexts train` run wrote (OUT/checkpoint.pt).
        device (str | torch.device): Where the model goes ("cpu", "cuda", a torch.device).

    Returns:
        The `EnergyRun`: `model`, `task`, `config` (the run's PretrainConfig), `steps`, `grad_mode`, `fd_delta`, `loss`
        and `loss_patch`.

    Raises:
        CheckpointError: The file is missing, unreadable, no pretraining checkpoint, of another method, or without
            the loss its run resolved.

    Examples:
        >>> import tempfile, torch
        >>> from pretexts import PretrainConfig, pretrain
        >>> from pretexts.engine import load_energy_run
        >>> out = tempfile.mkdtemp()  # a tiny run: one step of a 0.2M-parameter ConvNeXt on synthetic images
        >>> _ = pretrain(PretrainConfig(backbone="test_convnext", task="random-mask", data="synthetic", epochs=1,
        ...     max_steps_per_epoch=1, batch_size=4, eval_images=4, monitor_every=0, workers=0, quiet=True, out=out))
        >>> run = load_energy_run(f"{out}/checkpoint.pt")
        >>> run.task.name, run.steps, run.loss, run.model.training
        ('random-mask', 2, 'mse', False)
        >>> sample = run.task(torch.rand(2, 3, 32, 32), torch.Generator().manual_seed(0))  # corrupted as it trained
        >>> states = run.restore(sample)
        >>> len(states), run.restoration_loss(states, sample.target).shape
        (2, torch.Size([]))
    """
    model, cfg = load_energy_model(checkpoint, device)
    args = EnergyMethod.parse_args(cfg)
    task = task_for(cfg, model=model)
    if args["loss"] == AUTO_LOSS:  # a run records the loss auto resolved to
        raise CheckpointError(
            f"checkpoint '{checkpoint}' does not record the loss its run trained with (it says --loss auto), so "
            f"another build of pretexts wrote it; start a new run with `pretexts train`."
        )
    patch = loss_patch(args, model.backbone, task, cfg.img_size)
    return EnergyRun(model, task, cfg, args["steps"], args["grad_mode"], args["fd_delta"], args["loss"], patch)
