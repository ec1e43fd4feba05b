"""The options of the commands that corrupt held-out images again with a checkpoint's task (`pretexts restore`,
`pretexts energy`), declared once so the two take the task as `pretexts train` does and cannot drift apart."""

import click

from .user_paths import UserPath


def checkpoint_task_options(what: str):
    """Decorator: --checkpoint, --task, --task-arg, --preset, --data, --steps, --seed, --device, --out and --force,
    in that order; `what` is what the command does with the images ("restore", "score")."""
    options = [
        click.option(
            "--checkpoint",
            type=UserPath(),
            required=True,
            help="A checkpoint.pt written by `pretexts train` (energy method).",
        ),
        click.option(
            "--task",
            default=None,
            help="The corruption. Default: the task the checkpoint trained on, with its trained arguments "
            "(--task-arg and --preset change them).",
        ),
        click.option(
            "--task-arg",
            "task_args",
            multiple=True,
            metavar="KEY=VALUE",
            help="A parameter of the task (`pretexts list -v`); repeatable.",
        ),
        click.option("--preset", default=None, help="A named preset of the task (`pretexts list -v`)."),
        click.option(
            "--data",
            type=UserPath(),
            default=None,
            help=f"Images to {what} (val/ split). Default: the checkpoint's data.",
        ),
        click.option(
            "--steps",
            type=click.IntRange(1, 64),
            default=None,
            help="Restoration steps (the energy method's bound). Default: the checkpoint's N.",
        ),
        click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True),
        click.option("--device", default="auto", show_default=True),
        click.option(
            "--out", type=UserPath(), required=True, help="The figure, a .png; its numbers go to the same name .json."
        ),
        click.option("--force", is_flag=True, help="Replace the figure and its .json if they exist."),
    ]

    def decorate(command):
        for option in reversed(options):  # click lists the option applied last first
            command = option(command)
        return command

    return decorate
