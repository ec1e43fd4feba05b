"""`--config FILE` and `--set KEY=VALUE`: a run's whole configuration in and out; and a command's options built
from the fields of its config dataclass (`options_from`).

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
from .help_sections import option, shown


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
    """The --config and --set options, shared by train, finetune, probe, segment and compare."""
    command = option(
        "--set",
        "sets",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override one config field (after --config and the options); repeatable.",
        section="config",
    )(command)
    return option(
        "--config",
        "config",
        default=None,
        metavar="FILE",
        help="Start from a .yaml or .json config (e.g. a run's OUT/config.json).",
        section="config",
    )(command)


def config_class(config: str) -> type:
    """'pretexts.engine.training.config:PretrainConfig' -> the class."""
    module, _, name = config.partition(":")
    return getattr(importlib.import_module(module), name)


def options_from(config: str):
    """Click options for every field of the config dataclass `config` ('module:Class') that declares its help
    (`engine.training.config.setting`): `--field-name`, typed as the field, with the field's help, listed under
    the field's section. Each option's own default is None, so one not given leaves the config's value; its help
    shows the dataclass's default."""
    cls = config_class(config)

    def decorate(command):
        for f in reversed(dataclasses.fields(cls)):
            if "help" in f.metadata:
                command = option(*option_names(f), **option_settings(f))(command)
        return command

    return decorate


def option_names(f: dataclasses.Field) -> tuple[str, str]:
    flag = f.metadata.get("option", "--" + f.name.replace("_", "-"))
    if f.type is bool and f.default is True:
        flag = f"{flag}/--no-{flag[2:]}"
    return flag, f.name


def option_settings(f: dataclasses.Field) -> dict:
    extra = {k: v for k, v in f.metadata.items() if k not in ("help", "option", "choices", "nargs")}
    kinds = typing.get_args(f.type) if isinstance(f.type, types.UnionType) else (f.type,)
    kind = next(t for t in kinds if t is not type(None))
    settings = {"default": None, "help": f.metadata["help"]}
    if f.default not in (None, (), dataclasses.MISSING) and kind is not bool:
        settings["show_default"] = shown(f.default)
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
