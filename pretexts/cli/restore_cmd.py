"""`pretexts restore`: the paper's figure for any task, corrupted | restored at each step | original."""

from pathlib import Path

import click

from . import main, parse_task_args
from .checkpoint_task_options import checkpoint_task_options


@main.command("restore")
@checkpoint_task_options("restore")
@click.option(
    "--images", "count", type=click.IntRange(1, 1024), default=8, show_default=True, help="Rows in the figure."
)
def restore_command(checkpoint, task, task_args, preset, data, steps, count, seed, device, out, force) -> None:
    """Restore held-out images with a pretrained energy model and draw the figure."""
    import torch

    from pretexts.engine.data.datasets import build_source
    from pretexts.engine.data.loader import AugmentedImages, held_out_batches, unaugmented_transform
    from pretexts.engine.evaluation.from_checkpoint import load_energy_model, task_for
    from pretexts.engine.methods.energy import EnergyMethod, figure_columns, restoration_error
    from pretexts.engine.methods.report import with_figure_numbers
    from pretexts.engine.training.figures import restoration_figure
    from pretexts.engine.training.file_writes import write_json
    from pretexts.engine.training.preflight import check_output_dir, resolve_device
    from pretexts.engine.training.run_folder import claim_output_file, figure_path

    out = figure_path(out)
    claim_output_file(out, force, inputs=[checkpoint], companions=[out.with_suffix(".json")])
    check_output_dir(out.parent, 0)  # made (or refused) before the work, not after
    dev = resolve_device(device)
    model, cfg = load_energy_model(checkpoint, dev)
    args = parse_task_args(task_args)
    if preset:
        args["preset"] = preset
    pretext = task_for(cfg, task, args, model)
    steps = steps or EnergyMethod.parse_args(cfg)["steps"]
    data = data or cfg.data
    source = build_source(data, "val", cfg.img_size, seed) or build_source(data, "train", cfg.img_size, seed)
    images_set = AugmentedImages(source, unaugmented_transform(cfg.img_size), seed)
    images = torch.cat(list(held_out_batches(images_set, count, seed, dev, workers=0)))
    columns = figure_columns(model, pretext, images, steps, seed=seed)
    error = restoration_error(model, pretext, [images], steps, dev, seed=seed)
    restoration_figure(
        columns, out, with_figure_numbers(f"{pretext.name} restored by {cfg.backbone} ({steps} steps)", error)
    )
    results = {"checkpoint": str(checkpoint), "task": pretext.name, "task_args": pretext.values(), **error.to_dict()}
    write_json(out.with_suffix(".json"), results)
    click.echo(
        f"wrote {out} and {Path(out).with_suffix('.json')}: {pretext.name}, corrupted MSE "
        f"{error.corrupted_mse:.5f} -> restored {error.restored_mse[-1]:.5f} on {error.images} images"
        f"{error.versus_trivial(as_ratio=False)}"
    )
