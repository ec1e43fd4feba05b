"""`pretexts upgrade-checkpoint`: convert a checkpoint of an older pretexts to the format this one reads."""

import click

from . import main


@main.command("upgrade-checkpoint")
@click.argument("old", type=click.Path(dir_okay=False))
@click.argument("new", type=click.Path(dir_okay=False))
def upgrade_command(old: str, new: str) -> None:
    """Rewrite the version-1 checkpoint OLD as NEW in the current format (weights-only, with a checksum).

    OLD is read without running any code in it (only weights and numpy arrays are unpickled) and kept as it is.
    """
    from pretexts.engine.training.upgrade import upgrade_checkpoint

    ckpt = upgrade_checkpoint(old, new)
    click.echo(f"wrote {new} (format version {ckpt['format_version']}); use it in place of {old}.")
