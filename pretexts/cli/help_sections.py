"""`--help` in sections (Data, Model, Optimisation, Method options, ...; cloup's aligned help sections). Each option
names its section where it is declared: a config field in `setting(..., section=...)`, an option of the CLI's own
with `section=`. Every default and range is written one way, click's `[default: X; 1<=x<=N]`."""

import click
import cloup
from cloup.formatting import HelpSection

from pretexts.engine.training.settings import SECTIONS


class SectionedOption(click.Option):
    """A click option listed under `section` (a key of `SECTIONS`). `show_default` may be the text of a default
    that is not the option's own: a config option's default stays None, so one not given leaves a config file's
    value, while its help shows the dataclass's default. `shown_range` is the allowed range a value is checked
    against later (by a method's or a probe's `Param`), shown as click shows an IntRange's."""

    def __init__(self, *decls, section: str, shown_range: str | None = None, **attrs):
        if section not in SECTIONS:
            raise ValueError(f"section must be one of {', '.join(SECTIONS)}, got {section!r}")
        super().__init__(*decls, **attrs)
        self.section, self.shown_range = section, shown_range

    def get_help_extra(self, ctx: click.Context):
        extra = super().get_help_extra(ctx)
        if isinstance(self.show_default, str):
            extra["default"] = self.show_default  # click would write a given text in parentheses
        if self.shown_range:
            extra["range"] = self.shown_range
        return extra


def option(*decls, section: str, **attrs):
    """`click.option` for an option listed under `section`."""
    return click.option(*decls, cls=SectionedOption, section=section, **attrs)


def shown(value) -> str:
    """A default as click writes it: a list's items joined by ', '."""
    return ", ".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def param_help(param) -> dict:
    """The help, shown default and range of an option for a declared `pretexts.Param` (a method's or a probe's)."""
    settings = {"help": sentence(param.help, param.choices or ())}
    if param.default is not None and param.kind is not bool:
        settings["show_default"] = shown(param.default)
    if param.low is not None and param.high is not None:
        settings["shown_range"] = f"{param.low}<=x<={param.high}"
    elif param.low is not None or param.high is not None:
        settings["shown_range"] = f"x>={param.low}" if param.high is None else f"x<={param.high}"
    return settings


def sentence(text: str, values=()) -> str:
    """`text` as a sentence of --help: capitalised (unless it starts with one of the `values` it explains, as
    'exact: double backward') and ending in a full stop."""
    first = text.replace(":", " ").split()[0] if text.strip() else ""
    text = text if first in map(str, values) else text[:1].upper() + text[1:]
    return text if text.endswith(".") else f"{text}."


class SectionedCommand(cloup.Command):
    """A command whose --help lists its options in `SECTIONS` order, each section under its title; an option that
    names none (click's --help) goes with the config file's."""

    def section_title(self, ctx: click.Context, section: str) -> str:
        return SECTIONS[section]

    def format_params(self, ctx: click.Context, formatter) -> None:
        records: dict[str, list] = {section: [] for section in SECTIONS}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None:
                records[getattr(param, "section", "config")].append(record)
        sections = [HelpSection(self.section_title(ctx, key), rows) for key, rows in records.items() if rows]
        formatter.write_many_sections(sections, aligned=True)
