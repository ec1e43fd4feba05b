"""`pretexts energy`: histograms of the energy of real, corrupted and restored images."""

import click

from . import main, parse_task_args


@main.command("energy")
@click.option("--checkpoint", required=True, help="A checkpoint.pt written by `pretexts train` (energy method).")
@click.option("--data", default=None, help="Images to score (val/ split). Default: the checkpoint's data.")
@click.option(
    "--task",
    default=None,
    help="Corruption. Default: the task the checkpoint trained on, with its trained arguments (--task-arg changes "
    "them).",
)
@click.option("--task-arg", "task_args", multiple=True, metavar="KEY=VALUE", help="A task parameter; repeatable.")
@click.option(
    "--images",
    type=click.IntRange(2, 100_000),  # a histogram's spread needs two energies
    default=512,
    show_default=True,
    help="Held-out images to score.",
)
@click.option(
    "--steps",
    type=click.IntRange(1, 64),
    default=None,
    help="Restoration steps (the energy method's bound). Default: the checkpoint's N.",
)
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
@click.option("--workers", type=click.IntRange(0, 64), default=2, show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option("--out", required=True, help="The figure, a .png; its numbers go to the same name .json.")
@click.option("--force", is_flag=True, help="Replace the figure and its .json if they exist.")
def energy_command(task_args, images, steps, **options) -> None:
    """Histograms of the energy of real images, corrupted ones and each restoration step (paper, Appendix)."""
    from pretexts.engine import energy_histogram

    results = energy_histogram(task_args=parse_task_args(task_args) or None, images=images, steps=steps, **options)
    groups = [k for k in results if isinstance(results[k], dict) and "mean" in results[k]]
    click.echo(
        f"{results['task']} on {results['images']} images, mean energy: "
        + ", ".join(f"{g} {results[g]['mean']:.4g}" for g in groups)
    )
    click.echo(
        f"real below corrupted for {100 * results['real_below_corrupted']:.1f}% of images; wrote "
        f"{options['out']} and its .json"
    )
