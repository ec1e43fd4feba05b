"""What a training run refuses as it starts, before anything is written to OUT: a batch too small for its BatchNorm
layers, and task arguments given to a pretraining method that uses no task.

A BatchNorm layer in training mode normalises each channel by the statistics of the values it sees in a batch:
images x the map's height x width. One image per process gives a CNN's last stage at 32 px (1x1 maps), or a
BatchNorm over pooled features, one value per channel, which torch's BatchNorm refuses mid-run with a ValueError and
the energy method's `SecondOrderBatchNorm2d` turns into NaN running statistics."""

import torch
from torch import nn

from pretexts.engine.modules.eval_mode import eval_mode
from pretexts.errors import ParameterError, UnknownNameError
from pretexts.registry import METHODS

MIN_VALUES = 2  # an unbiased variance needs two values a channel


def trained_batchnorms(model: nn.Module) -> list[str]:
    """The names of `model`'s BatchNorm layers (SyncBatchNorm and subclasses included) that a training step runs in
    training mode: all but the frozen ones (affine weights that take no gradient), which a frozen backbone keeps in
    eval mode, as `finetune --linear-probe` does."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.modules.batchnorm._BatchNorm)
        and not (module.affine and not any(p.requires_grad for p in module.parameters(recurse=False)))
    ]


def values_per_image(model: nn.Module, layers: list[str], img_size: int, device, forward=None) -> dict[str, int]:
    """Each layer's values per channel for one image (its input's height x width; 1 over pooled features), from one
    forward (`forward`, by default the model's) of a blank image in eval mode. A layer the forward does not reach,
    or a forward that fails (the run's own first check says why), counts as one value."""
    seen: dict[str, int] = {}

    def recorder(name):
        def record(module, inputs, output):
            x = inputs[0]
            seen[name] = min(seen.get(name, x.numel()), x.numel() // max(1, x.shape[0] * x.shape[1]))

        return record

    handles = [model.get_submodule(name).register_forward_hook(recorder(name)) for name in layers]
    try:
        with eval_mode(model), torch.no_grad(), torch.compiler.set_stance("force_eager"):
            (forward or model)(torch.zeros(1, 3, img_size, img_size, device=device))
    except (RuntimeError, ValueError):
        pass
    finally:
        for handle in handles:
            handle.remove()
    return {name: seen.get(name, 1) for name in layers}


def check_batchnorm_batch(
    model: nn.Module,
    batch_size: int,
    world: int,
    accum_iter: int,
    owner: str | None,
    img_size: int,
    device,
    forward=None,
) -> None:
    """Refuse in one line a batch whose micro-batch gives a trained BatchNorm layer fewer than 2 values a channel:
    images per process, after the --accum-iter split (SyncBatchNorm's statistics span the processes), x the values
    one image gives it at `img_size`. `owner` names the backbone."""
    per_process = batch_size // world // accum_iter
    layers = trained_batchnorms(model)
    synced = any(isinstance(model.get_submodule(name), nn.SyncBatchNorm) for name in layers)
    images = per_process * world if synced and world > 1 else per_process
    if not layers or images >= MIN_VALUES:  # two images give every channel two values: no forward needed
        return
    per_image = values_per_image(model, layers, img_size, device, forward)
    short = [name for name in layers if per_image[name] * images < MIN_VALUES]
    if not short:
        return
    more = f" and {len(short) - 1} more" if len(short) > 1 else ""
    whose = f"the BatchNorm of this {owner} model" if owner else "the model's BatchNorm"  # the layer says where
    parts = [f"{world} processes"] * (world > 1) + [f"--accum-iter {accum_iter}"] * (accum_iter > 1)
    split = f"--batch-size {batch_size}"
    if parts:
        split += f" ({per_process} image per process and micro-batch: {' x '.join(parts)})"
    needed = MIN_VALUES * world * accum_iter
    fewer = " or a smaller --accum-iter" if accum_iter > 1 else ""
    raise ParameterError(
        f"{split} cannot train {whose} ({short[0]}{more}: at {img_size} px one image gives it one value a channel, "
        f"and its batch statistics need {MIN_VALUES} or more); use --batch-size {needed} or more{fewer}."
    )


def refuse_unused_task_args(cfg) -> None:
    """A pretraining config (one with `method` and `task_args`) whose method corrupts the images its own way
    (`Method.uses_task` False: MAE, SimMIM) takes no task arguments: they would be checked against, and recorded
    for, the default task that the run never applies."""
    method, args = getattr(cfg, "method", None), getattr(cfg, "task_args", None)
    if not args or not isinstance(method, str):
        return
    try:
        uses_task = METHODS.get(method).uses_task
    except UnknownNameError:  # refused, with close names, where the method is built
        return
    if not uses_task:
        given = ", ".join("--preset" if key == "preset" else f"--task-arg {key}" for key in args)
        raise ParameterError(
            f"{given}: method '{method}' corrupts the images its own way and uses no task (--task is unused), so "
            f"task arguments would do nothing; leave them out, or set its options with --method-arg "
            f"(`pretexts train --method {method} --help`)."
        )
