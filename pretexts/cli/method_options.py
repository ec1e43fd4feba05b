"""The selected method's own options: `pretexts train --steps 3` for the energy method, `--mask-ratio 0.6` for
MAE. Which options a command line has depends on the --method (or --set method=, or --config file) it names."""

import dataclasses

import click

from ..errors import ParameterError
from .config_file import config_class
from .config_reader import read_config_file
from .help_sections import SectionedCommand, SectionedOption, param_help


def method_named(args: list[str], default: str) -> str:
    """The method a command line names, read before it is parsed: the last --set method=X, else --method X (or
    --method=X), else its --config file's 'method', else `default`.

    Kept because click has no way of its own to make a command's options depend on another option's value: it
    builds its parser from `get_params` before it reads any argument, and an eager callback runs only after the
    whole line is parsed, when an option of the method (MAE's --mask-ratio) has already been refused."""
    method = config = setting = None
    for arg, after in zip(args, [*args[1:], None]):
        if arg == "--":
            break
        name, equals, value = arg.partition("=")
        value = value if equals else after
        if name == "--method":
            method = value
        elif name == "--config":
            config = value
        elif name == "--set" and value and value.replace("-", "_").startswith("method="):
            setting = value.partition("=")[2].strip()
    if setting or method:
        return setting or method
    if config:
        try:
            return read_config_file(config).get("method") or default
        except ParameterError:
            return default  # the run's own read says what is wrong with the file
    return default


def method_options(name: str, taken: set[str]) -> list[click.Option]:
    """An option per param the method `name` declares (`Method.method_params`): `--steps` for 'steps', typed and
    checked as the param declares, listed under the method's section with its default and range; a name in
    `taken` (a config field, another option) is left to --method-arg. None for a method that is not installed,
    whose run then says so."""
    from pretexts.errors import PretextsError
    from pretexts.registry import METHODS

    try:
        method = METHODS.get(name)
    except PretextsError:
        return []
    options = []
    for key, param in method.method_params.items():
        if key in taken:
            continue
        dashed = key.replace("_", "-")
        flag = f"--{dashed}"
        settings = {"default": None, **param_help(param)}
        if len({values[key] for values in method.recipe_defaults.values() if key in values}) > 1:
            settings.pop("show_default", None)  # the param's help says what each recipe gives
        if param.choices is not None:
            settings["type"] = click.Choice([str(c) for c in param.choices])
        elif param.kind is bool:
            flag, settings["is_flag"] = f"{flag}/--no-{dashed}", True
            settings["show_default"] = dashed if param.default else f"no-{dashed}"  # as click shows a flag pair's
        elif param.kind in (int, float):
            settings["type"] = param.kind
        option = SectionedOption([flag, key], section="method", **settings)
        option.method_param = True  # the command moves its value into method_args
        options.append(option)
    return options


def with_method_options(config: str) -> type[click.Command]:
    """A sectioned command whose options include those of the method its command line selects (`method_named`),
    so `pretexts train --method mae --help` lists MAE's options, under "Method options (mae)", and no energy
    option. `config` ('module:Class') gives the default method and the fields whose names a method's option may
    not take."""
    cls = config_class(config)
    fields = {f.name for f in dataclasses.fields(cls)}

    def selected(ctx) -> str:
        return ctx.meta.get("pretexts.method") or cls.method  # the dataclass's default method

    class MethodOptionsCommand(SectionedCommand):
        def parse_args(self, ctx, args):
            ctx.meta["pretexts.method"] = method_named(list(args), cls.method)
            return super().parse_args(ctx, args)

        def section_title(self, ctx, section: str) -> str:
            title = super().section_title(ctx, section)
            return f"{title} ({selected(ctx)})" if section == "method" else title

        def get_params(self, ctx):
            params = super().get_params(ctx)
            extra = method_options(selected(ctx), fields | {p.name for p in params})
            # before the command's own --method-arg: the named options first, the catch-all after
            at = next((i for i, p in enumerate(params) if getattr(p, "section", None) == "method"), len(self.params))
            return [*params[:at], *extra, *params[at:]]

    return MethodOptionsCommand


def method_option_values(ctx: click.Context, options: dict) -> dict:
    """The values given to the selected method's own options (removed from `options`), for method_args."""
    names = [p.name for p in ctx.command.get_params(ctx) if getattr(p, "method_param", False)]
    values = {name: options.pop(name, None) for name in names}
    return {name: value for name, value in values.items() if value is not None}
