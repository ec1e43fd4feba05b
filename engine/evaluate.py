"""Held-out restoration error and the columns of the restoration figure."""
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from .restore import restore


@contextmanager
def eval_mode(model):
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def restoration_error(model, task, batches, steps: int, device, seed: int = 0) -> dict:
    """Pixel (or state) MSE to the target of the corrupted input and of each restored step.

    `batches` yields float [B,3,H,W] in [0,1]. The corruption is seeded, so two models are
    compared on the same corrupted images.
    """
    generator = torch.Generator(device=device).manual_seed(seed)
    corrupted, restored, count = 0.0, [0.0] * steps, 0
    ranked, gap = 0.0, 0.0
    with eval_mode(model), torch.no_grad():
        for images in batches:
            images = images.to(device)
            sample = task(images, generator)
            states = restore(model, task, sample, steps)
            n = images.shape[0]
            corrupted += F.mse_loss(sample.state.float(), sample.target.float()).item() * n
            for j, state in enumerate(states):
                restored[j] += F.mse_loss(state.float(), sample.target.float()).item() * n
            if steps == 0:  # N = 0 restores nothing: how well the energy ranks clean below corrupted
                difference = task.energy(model, sample, sample.state) - task.energy(model, sample, sample.target)
                ranked += (difference > 0).sum().item()
                gap += difference.sum().item()
            count += n
    if count == 0:
        raise ValueError("no held-out images to evaluate")
    error = {"corrupted_mse": corrupted / count, "restored_mse": [r / count for r in restored], "images": count}
    if steps == 0:
        error.update(ranked_right=ranked / count, energy_gap=gap / count)
    return error


def figure_columns(model, task, images: torch.Tensor, steps: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """{'corrupted': ..., 'step 1': ..., ..., 'original': ...} as images for `restoration_figure`."""
    generator = torch.Generator(device=images.device).manual_seed(seed)
    with eval_mode(model), torch.no_grad():
        sample = task(images, generator)
        states = restore(model, task, sample, steps)
    columns = {"corrupted": task.preview(sample, sample.state)}
    for j, state in enumerate(states, 1):
        columns[f"step {j}"] = task.preview(sample, state)
    columns["original"] = images
    return columns
