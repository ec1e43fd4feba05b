"""`pretexts energy`: histograms of the energy of real, corrupted and restored images."""

import click

from . import main, parse_task_args
from .checkpoint_task_options import checkpoint_task_options


@main.command("energy")
@checkpoint_task_options("score")
@click.option(
    "--images",
    type=click.IntRange(2, 100_000),  # a histogram's spread needs two energies
    default=512,
    show_default=True,
    help="Held-out images to score.",
)
@click.option("--workers", type=click.IntRange(0, 64), default=2, show_default=True)
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
