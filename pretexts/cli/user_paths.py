"""A `~` in any path a user gives a command is their home folder, wherever it is given: an option (`--out=~/x`,
which the shell leaves alone), a config file's value or --set (which no shell sees), --config itself. The one rule,
applied where the CLI reads paths: a config's `PATH_FIELDS` in `build_config`, `UserPath` options elsewhere."""

import os

import click

# the config fields (of train, finetune, probe, segment and compare) that name a file or folder
PATH_FIELDS = ("data", "out", "checkpoint", "resume")


def user_path(text):
    """`text` with a leading `~` (or `~user`) expanded; anything else, and what is not text, as given."""
    return os.path.expanduser(text) if isinstance(text, str) else text


def with_user_paths(values: dict) -> dict:
    """A command's config values with each path field's `~` expanded."""
    return {key: user_path(value) if key in PATH_FIELDS else value for key, value in values.items()}


class UserPath(click.ParamType):
    """An option's or argument's path, its `~` expanded (click.Path leaves it as typed)."""

    name = "path"

    def convert(self, value, param, ctx):
        return user_path(value)
