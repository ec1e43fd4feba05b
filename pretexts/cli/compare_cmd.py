"""`pretexts compare`: which pretext and method give the best features on my data. Each (task, method) pair is
pretrained for the same budget, scored by kNN, the linear probe and (if asked) fine-tuning, beside random init;
one ranked table (mean +- std over seeds, ties marked) and one plot, after a plan and an estimate of the time."""

import sys

import click

from . import main, rank_zero_echo
from .config_file import build_config, config_options, options_from
from .help_sections import SectionedCommand

CONFIG = "pretexts.engine.compare.config:CompareConfig"
# each takes several values after one flag, space-separated as its --help says: `--seeds 0 1 2`
LISTS = ("--tasks", "--methods", "--budget", "--steps", "--seeds")


def spread_lists(args: list[str]) -> list[str]:
    """`--seeds 0 1 2` -> `--seeds 0 --seeds 1 --seeds 2` for the list options (click's own are one value per
    use); the values run up to the next option."""
    spread, current = [], None
    for arg in args:
        if arg.startswith("-") and not arg.lstrip("-").replace(".", "", 1).isdigit():
            current = arg if arg in LISTS else None
            spread.append(arg)
        elif current and spread[-1] != current:
            spread += [current, arg]
        else:
            spread.append(arg)
    return spread


class CompareCommand(SectionedCommand):
    list_options = LISTS  # the options whose values go after one flag (tests/docs_blocks.py checks the docs' spelling)

    def parse_args(self, ctx, args):
        return super().parse_args(ctx, spread_lists(args))


@main.command("compare", cls=CompareCommand)
@options_from(CONFIG)
@config_options
def compare_command(config, sets, **options) -> None:
    """Pretrain every --tasks x --methods pair for --budget minutes and rank the features they leave, ties marked.

    Prints the plan and an estimate of the total time first, an ETA after each cell, and a table within 100
    columns; writes OUT/compare.md and OUT/compare.csv (every column), OUT/compare.png, OUT/compare.json and a
    cached cell per pair and seed (a rerun resumes)."""
    from pretexts.engine.compare.config import CompareConfig
    from pretexts.engine.compare.run import compare
    from pretexts.engine.compare.scoring import Interrupted

    # what came from --config is said before the plan, as compare's own notes on its settings are
    cfg = build_config(CompareConfig, options, config, sets, echo=rank_zero_echo(0))  # one process (`single_process`)
    try:
        compare(cfg, echo=click.echo)
    except Interrupted as stopped:
        saved = (
            f"every cell is done and the report is written in {cfg.out}/"
            if stopped.finished
            else f"saved what the cell had in {cfg.out}/cells/. Run the same command again to continue"
        )
        click.echo(f"{stopped}; {saved}.", err=True)
        sys.exit(stopped.exit_code)
