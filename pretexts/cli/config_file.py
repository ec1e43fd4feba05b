"""`--config FILE` and `--set KEY=VALUE`: a run's whole configuration in and out.

A run saves OUT/config.json (every field of its config dataclass); the same file, or a YAML one with any
subset of the fields, starts a run again. Precedence: the file, then the command's own options, then
each --set in order.
"""

import dataclasses
import importlib
import json
import types
import typing
from pathlib import Path

import click
import yaml

from ..errors import ParameterError, suggest


def read_config_file(path: str) -> dict:
    """The mapping in a .yaml / .yml / .json file; one clear line for a missing or malformed file."""
    file = Path(path)
    if not file.is_file():
        raise ParameterError(
            f"config file '{path}' does not exist; give a .yaml or .json file (a run's own OUT/config.json works)."
        )
    try:
        text = file.read_text()
        values = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise ParameterError(f"config file '{path}' cannot be parsed at line {err.lineno}: {err.msg}.") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise ParameterError(f"config file '{path}' cannot be parsed{line}: {getattr(err, 'problem', err)}.") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ParameterError(
            f"config file '{path}' must hold a mapping of field: value, not a {type(values).__name__}."
        )
    return values


def convert(cls, name: str, text: str, where: str = "--set"):
    """A --set value as the field's declared type: numbers, booleans, None, lists and mappings (YAML/JSON).
    `where` names the value's source in the one-line error of a value that cannot be read."""
    kind = typing.get_type_hints(cls)[name]
    allowed = set(typing.get_args(kind) or (kind,))
    shown = f"--set {name}={text}" if where == "--set" else f"{where}: {name}: {text}"
    if type(None) in allowed and text.strip().lower() in ("none", "null", "~", ""):
        return None
    if str in allowed:
        return text
    if float in allowed:
        try:
            return float(text) if int not in allowed or any(c in text.lower() for c in ".en") else int(text)
        except ValueError:
            raise ParameterError(f"{shown}: {name} must be a number.") from None
    try:
        return yaml.safe_load(text)  # int, bool, tuple (a list), dict: YAML spells them all
    except yaml.YAMLError as err:
        problem = " ".join(str(getattr(err, "problem", None) or "cannot be parsed").split())
        raise ParameterError(
            f"{shown}: not a valid value ({problem}); write a list as [0.9, 0.95] and a mapping as {{key: value}}."
        ) from None


def apply_sets(cls, values: dict, pairs: tuple[str, ...], loose=None) -> dict:
    """`values` with each --set KEY=VALUE applied in order; a key that is no field of `cls` goes where `loose`
    moves it (a method's or a probe's option: into method_args or probe_args, as text its owner converts)."""
    values = dict(values)
    known = {f.name for f in dataclasses.fields(cls)}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not KEY=VALUE (e.g. --set epochs=10).", param_hint="--set")
        if key not in known and loose:
            moved = loose({**values, key: text.strip()})
            if key not in moved and any(isinstance(inner, dict) and key in inner for inner in moved.values()):
                values = moved  # an option of the run's method (method_args) or of a probe (probe_args)
                continue
        check_known(cls, [key], "--set")
        values[key] = convert(cls, key, text.strip())
    return values


def check_known(cls, keys, where: str) -> None:
    known = [f.name for f in dataclasses.fields(cls)]
    for key in keys:
        if key not in known:
            raise ParameterError(f"{where}: unknown field '{key}'.{suggest(key, known)} Fields: {', '.join(known)}.")


def build_config(
    cls, options: dict, config: str | None, sets: tuple[str, ...], merge=("task_args",), resume=None, loose=None
):
    """`cls` from the file, the command's explicit options (None = not given) and the --set overrides.
    Mappings named in `merge` (task arguments) are updated key by key rather than replaced. `loose(values)`
    moves the keys that are no field of `cls` where they belong (a method's options, into method_args) before
    the rest are refused. With --resume, `resume(values)` lays what was given over the checkpoint's own config."""
    values = read_config_file(config) if config else {}
    if loose:  # the method an option names decides where the file's keys belong, else the file's own
        method = options.get("method") or values.get("method")
        values = loose({**values, **({"method": method} if method else {})})
    check_known(cls, values, f"config file '{config}'")
    # YAML 1.1 reads 1e-3 as a string: such values take the field's type, as --set values do
    values = {k: convert(cls, k, v, f"config file '{config}'") if isinstance(v, str) else v for k, v in values.items()}
    for key, value in options.items():
        if value is None or value == () or value == {}:
            continue
        values[key] = {**values.get(key, {}), **value} if key in merge and isinstance(value, dict) else value
    values = apply_sets(cls, values, sets, loose)
    if resume and values.get("resume"):
        values = resume(values)
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in values
    ]
    if required:
        raise ParameterError(
            f"{required[0]} is required: give --{required[0].replace('_', '-')} or put it in --config."
        )
    return cls(**values)


def config_options(command):
    """The --config and --set options, shared by train, finetune and probe."""
    command = click.option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override one config field (after --config and the options); repeatable.",
    )(command)
    return click.option(
        "--config",
        "config",
        default=None,
        metavar="FILE",
        help="Start from a .yaml or .json config (e.g. a run's OUT/config.json).",
    )(command)


def config_class(config: str) -> type:
    module, _, name = config.partition(":")
    return getattr(importlib.import_module(module), name)


def options_from(config: str):
    """Click options for every field of the config dataclass `config` ('module:Class') that declares its help
    (`engine.training.config.setting`): `--field-name`, typed as the field, with the field's help. Each
    option's own default is None, so one not given leaves the config's value (shown by `defaults_from`)."""
    cls = config_class(config)

    def decorate(command):
        for f in reversed(dataclasses.fields(cls)):
            if "help" in f.metadata:
                command = click.option(*option_names(f), **option_settings(f))(command)
        return command

    return decorate


def option_names(f: dataclasses.Field) -> tuple[str, str]:
    flag = f.metadata.get("option", "--" + f.name.replace("_", "-"))
    if f.type is bool and f.default is True:
        flag = f"{flag}/--no-{flag[2:]}"
    return flag, f.name


def option_settings(f: dataclasses.Field) -> dict:
    extra = {k: v for k, v in f.metadata.items() if k not in ("help", "option", "choices", "nargs")}
    kinds = [
        t
        for t in (typing.get_args(f.type) if isinstance(f.type, types.UnionType) else (f.type,))
        if t is not type(None)
    ]
    kind = kinds[0]
    settings = {"default": None, "help": f.metadata["help"]}
    if "choices" in f.metadata:
        settings["type"] = click.Choice(f.metadata["choices"])
    elif kind is bool:
        settings["is_flag"] = True
    elif "nargs" in f.metadata:
        settings["type"] = (float,) * f.metadata["nargs"]
    elif extra.get("multiple"):
        settings["type"] = type(f.default[0]) if f.default else str
    elif "flag_value" in extra:
        settings["is_flag"] = False  # the value is optional: `--resume` alone means flag_value
    else:
        settings["type"] = kind
    return {**settings, **extra}


def defaults_from(config: str) -> type:
    """A click command class whose --help shows each option's default as its config dataclass declares it
    (one source of defaults). `config` is 'module:Class', imported only when help is shown."""

    class ConfigDefaultsCommand(click.Command):
        def format_options(self, ctx, formatter):
            cls = config_class(config)
            defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
            defaults.update(
                {
                    f.name: f.default_factory()
                    for f in dataclasses.fields(cls)
                    if f.default_factory is not dataclasses.MISSING
                }
            )
            shown = {
                p: p.default
                for p in self.params
                if isinstance(p, click.Option) and not p.is_flag and defaults.get(p.name) not in (None, {}, ())
            }
            for param in shown:  # the real default stays None: an option not given leaves the config's own value
                param.default, param.show_default = defaults[param.name], True
            try:
                super().format_options(ctx, formatter)
            finally:
                for param, original in shown.items():
                    param.default = original

    return ConfigDefaultsCommand


def method_named(args: list[str], default: str) -> str:
    """The method a command line names, read before it is parsed (its options depend on it): the last --set
    method=X, else --method X (or --method=X), else its --config file's 'method', else `default`."""
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
    checked as the param declares, its default in the help; a name in `taken` (a config field, another option)
    is left to --method-arg. None for a method that is not installed, whose run then says so."""
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
        flag = "--" + key.replace("_", "-")
        by_recipe = {values[key] for values in method.recipe_defaults.values() if key in values}
        shown = param.default if len(by_recipe) <= 1 else None  # the param's help says what each recipe gives
        settings = {"default": None, "help": f"{param.help} [default: {shown}]" if shown is not None else param.help}
        if param.choices is not None:
            settings["type"] = click.Choice([str(c) for c in param.choices])
        elif param.kind is bool:
            flag, settings["is_flag"] = f"{flag}/--no-{flag[2:]}", True
        elif param.kind in (int, float):
            settings["type"] = param.kind
        option = click.Option([flag, key], **settings)
        option.method_param = True  # the command moves its value into method_args
        options.append(option)
    return options


def with_method_options(base: type[click.Command], config: str) -> type[click.Command]:
    """`base` whose options include those of the method its command line selects (`method_named`), so
    `pretexts train --method mae --help` lists MAE's options and no energy option. `config` ('module:Class')
    gives the default method and the fields whose names a method's option may not take."""

    class MethodOptionsCommand(base):
        def parse_args(self, ctx, args):
            ctx.meta["pretexts.method"] = method_named(list(args), self.default_method())
            return super().parse_args(ctx, args)

        def default_method(self) -> str:
            return next(f.default for f in dataclasses.fields(config_class(config)) if f.name == "method")

        def get_params(self, ctx):
            params = super().get_params(ctx)
            taken = {f.name for f in dataclasses.fields(config_class(config))} | {p.name for p in params}
            extra = method_options(ctx.meta.get("pretexts.method") or self.default_method(), taken)
            own = len(self.params)  # the command's own options, then click's --help
            return [*params[:own], *extra, *params[own:]]

    return MethodOptionsCommand


def method_option_values(ctx: click.Context, options: dict) -> dict:
    """The values given to the selected method's own options (removed from `options`), for method_args."""
    names = [p.name for p in ctx.command.get_params(ctx) if getattr(p, "method_param", False)]
    values = {name: options.pop(name, None) for name in names}
    return {name: value for name, value in values.items() if value is not None}
