"""Energies of real images, of corrupted ones and of each restoration step.

Paper, Appendix: "Histograms of energy scores"."""

import matplotlib
import torch
from matplotlib.ticker import MaxNLocator

from pretexts.engine.data.datasets import build_source
from pretexts.engine.data.loader import AugmentedImages, held_out_batches, unaugmented_transform
from pretexts.engine.evaluation.from_checkpoint import load_energy_model, task_for
from pretexts.engine.methods.energy import EnergyMethod
from pretexts.engine.methods.energy.restore import restore
from pretexts.engine.methods.states import state_adapter
from pretexts.engine.modules.eval_mode import eval_mode
from pretexts.engine.training.figures import fit_axes_title, new_figure
from pretexts.engine.training.file_writes import save_figure, write_json
from pretexts.engine.training.preflight import resolve_device
from pretexts.engine.training.run_folder import claim_output_file, figure_path
from pretexts.errors import DataError, ParameterError


def energy_scores(model, task, batches, steps: int, device, seed: int = 0) -> dict[str, torch.Tensor]:
    """{'real', 'corrupted', 'step 1', ..., 'step N'}: energies [images] on the same seeded corruptions.

    'real' is the energy of the target (the clean image; for patch sorting, the true position embeddings).
    """
    generator = torch.Generator(device=device).manual_seed(seed)
    scores: dict[str, list] = {"real": [], "corrupted": [], **{f"step {j}": [] for j in range(1, steps + 1)}}
    with eval_mode(model), torch.no_grad():
        for images in batches:
            sample = task(images.to(device), generator)
            states = restore(model, task, sample, steps)  # takes its own gradients inside
            for name, state in zip(scores, [sample.target, sample.state, *states]):
                scores[name].append(state_adapter(task, model).energy(sample, state).float().cpu())
    scored = {name: torch.cat(values) for name, values in scores.items() if values}
    held = len(scored.get("real", ()))
    if held < 2:  # a spread (std) and a histogram need two energies; `energy_histogram` asks for 2 or more
        raise DataError(
            f"the data gave {held} held-out image{'s' * (held != 1)} and the histogram needs at least 2: give --data "
            f"a folder with more images in val/ (a flat folder holds out 5 % of its images)."
        )
    return scored


def summarise(scores: dict[str, torch.Tensor]) -> dict:
    """Mean, std and median of each group, and how often the real / last restored state beats the corrupted one."""
    last = list(scores)[-1]
    summary = {
        name: {"mean": v.mean().item(), "std": v.std().item(), "median": v.median().item()}
        for name, v in scores.items()
    }
    summary["real_below_corrupted"] = (scores["real"] < scores["corrupted"]).float().mean().item()
    summary[f"{last}_below_corrupted"] = (scores[last] < scores["corrupted"]).float().mean().item()
    summary["images"] = scores["real"].numel()
    return summary


def histogram_figure(scores: dict[str, torch.Tensor], path, title: str = "") -> None:
    """One histogram per group on shared bins, drawn as outlines in distinct colours of one colormap (filled bars
    would hide each other and blend into colours the legend lacks), the legend outside the data."""
    values = torch.cat(list(scores.values()))
    bins = torch.linspace(values.min().item(), values.max().item(), 41).tolist()
    fig = new_figure(figsize=(7, 3.5))
    ax = fig.subplots()
    colours = matplotlib.colormaps["tab10"].colors
    for i, (name, v) in enumerate(scores.items()):
        ax.hist(v.numpy(), bins=bins, histtype="step", linewidth=1.6, color=colours[i % len(colours)], label=name)
    ax.set_xlabel("energy (lower: more image-like)")
    ax.set_ylabel("images")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fit_axes_title(ax)
    save_figure(fig, path)  # by rename: never through a link, never half a file


def held_out_images(data: str, img_size: int, count: int, seed: int, device, workers: int = 2):
    """A seeded subset of `count` images of the val split (the train split when there is none)."""
    source = build_source(data, "val", img_size, seed) or build_source(data, "train", img_size, seed)
    dataset = AugmentedImages(source, unaugmented_transform(img_size), seed)
    return held_out_batches(dataset, count, seed, device, workers)


def energy_histogram(
    checkpoint: str,
    out: str,
    data: str | None = None,
    task: str | None = None,
    task_args: dict | None = None,
    preset: str | None = None,
    images: int = 512,
    steps: int | None = None,
    seed: int = 0,
    device: str = "auto",
    workers: int = 2,
    force: bool = False,
) -> dict:
    """Score held-out images with a pretrained energy model; write OUT (png) and OUT with suffix .json.

    The task, its arguments, the data and the number of steps default to the checkpoint's own; `task_args` and
    `preset` without a `task` go over the checkpoint's task arguments (as `pretexts restore` takes them). `images`
    is at least 2 (a histogram's spread needs two energies). Existing files are replaced only with `force`, and
    never the checkpoint.

    Args:
        checkpoint: A checkpoint of `pretexts train --method energy`.
        out: The figure's file (.png, .pdf, ...); its numbers go beside it with suffix .json.
        data: The images to score (the val split, else the training one); None: the checkpoint's data.
        task: The corruption to score; None: the checkpoint's task.
        task_args: The task's arguments, over the checkpoint's when `task` is None.
        preset: One of the task's presets (`pretexts list -v`), over the checkpoint's when `task` is None.
        images: How many held-out images to score, at least 2.
        steps: Restoration steps; None: the checkpoint's.
        seed: Seeds which images are drawn and their corruptions.
        device: "auto" (CUDA where there is one, else the CPU), "cpu", "cuda", "cuda:1", ...
        workers: Data loader processes (0: in this one).
        force: Replace existing figure and .json files.

    Returns:
        What OUT with suffix .json holds: `checkpoint`, `task`, `task_args`, `data`, `steps`, `images` (how many
            were scored) and `figure` (the png's path); the `mean`, `std` and `median` energy of each group
            (`real`, `corrupted`, `step 1` ... `step N`); and `real_below_corrupted` and `step N_below_corrupted`,
            the share of images whose real, or last restored, state has a lower energy than its corrupted one.
    """
    if isinstance(images, bool) or not isinstance(images, int) or images < 2:
        raise ParameterError(f"images must be at least 2 (a histogram's spread needs two energies), got {images!r}.")
    path = figure_path(out)
    claim_output_file(path, force, inputs=[checkpoint], companions=[path.with_suffix(".json")])
    device = resolve_device(device)
    model, cfg = load_energy_model(checkpoint, device)
    args = dict(task_args or {})
    if preset is not None:
        args["preset"] = preset
    corruption = task_for(cfg, task, args, model)
    steps = steps or EnergyMethod.parse_args(cfg)["steps"]
    data = data or cfg.data
    batches = held_out_images(data, cfg.img_size, images, seed, device, workers)
    scores = energy_scores(model, corruption, batches, steps, device, seed)
    histogram_figure(scores, path, f"energy of {corruption.name} on {cfg.backbone} ({scores['real'].numel()} images)")
    results = {
        "checkpoint": str(checkpoint),
        "task": corruption.name,
        "task_args": corruption.values(),
        "data": data,
        "steps": steps,
        **summarise(scores),
        "figure": str(path),
    }
    write_json(path.with_suffix(".json"), results)
    return results
