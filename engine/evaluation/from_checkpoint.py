"""Rebuild the energy model and its task from a pretraining checkpoint."""

import pretexts
from pretexts.engine.methods.energy import EnergyMethod
from pretexts.engine.methods.energy.method import energy_model_for
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
