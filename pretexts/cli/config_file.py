"""`--config FILE` and `--set KEY=VALUE`: a run's whole configuration in and out; and a command's options built
from the fields of its config dataclass (`options_from`).

A run saves OUT/config.json (every field of its config dataclass but --force and --resume, and which values
were derived: engine/training/config_record.py); the same file, or a YAML one with any subset of the fields,
starts a run again. Precedence: the file, then the command's own options, then each --set in order. What the file
records as derived (a recipe's values, what `auto` resolved to) is derived again from the file's given values and
the command line's.
"""

import dataclasses
import importlib
import json
import os
import re
import types
import typing

import click
import yaml

from ..engine.training.config_record import DERIVED, PER_INVOCATION, given_values
from ..errors import ParameterError, suggest
from .config_reader import ValueLimitError, load_yaml, read_config_file
from .help_sections import option, shown
from .user_paths import with_user_paths

YES, NO = ("true", "yes", "on"), ("false", "no", "off")  # YAML 1.1's booleans


def convert(cls, name: str, text: str, where: str = "--set"):
    """A --set or config file value as the field's declared type: numbers, booleans, None, lists and mappings
    (YAML/JSON). A boolean, spelled or not, given to an option whose value is optional (`compile`, `resume`) means
    the option alone (true) or not given (false); None as `means_none` says. `where` names the value's source
    (--set, else a file) in the one-line error of a value that cannot be read."""
    kind = typing.get_type_hints(cls)[name]
    allowed = set(typing.get_args(kind) or (kind,))
    flag = next(f for f in dataclasses.fields(cls) if f.name == name).metadata.get("flag_value")
    spelled = str(text).strip().lower()
    if flag is not None and spelled in YES + NO:  # an option whose value is optional (--compile, --resume):
        return flag if spelled in YES else None  # true means the option alone, false leaves it off
    if not isinstance(text, str):
        return text  # a file's value as YAML or JSON read it (its null already None)
    given = text if len(text) <= 80 else text[:60] + "..."
    shown = f"--set {name}={given}" if where == "--set" else f"{where}: {name}: {given}"
    if means_none(spelled, allowed, where == "--set"):
        return None
    if str in allowed:
        return text
    if float in allowed:
        try:
            return float(text) if int not in allowed or any(c in text.lower() for c in ".en") else int(text)
        except ValueError:
            raise ParameterError(f"{shown}: {name} must be a number.") from None
    try:
        return load_yaml(text)  # int, bool, tuple (a list), dict: YAML spells them all
    except ValueLimitError as err:
        raise ParameterError(f"{shown}: refused, the value {err}.") from None
    except yaml.YAMLError as err:
        problem = " ".join(str(getattr(err, "problem", None) or "cannot be parsed").split())
        raise ParameterError(
            f"{shown}: not a valid value ({problem}); write a list as [0.9, 0.95] and a mapping as {{key: value}}."
        ) from None


def means_none(spelled: str, allowed: set, raw: bool) -> bool:
    """Whether a value (lower case) unsets an optional field. A text field's is YAML's null alone, from `raw` --set
    text as in a file (whose YAML read it), so 'none' is text from either (`randaug: none`, `--set randaug=none`:
    RandAugment off); another field's is 'none' too."""
    text = str in allowed  # a file's text is what its YAML read as text
    return type(None) in allowed and (raw or not text) and spelled in ("null", "~", "", *(() if text else ("none",)))


def apply_sets(cls, values: dict, pairs: tuple[str, ...], loose=None) -> dict:
    """`values` with each --set KEY=VALUE applied in order; a key that is no field of `cls` goes where `loose`
    moves it (a method's or a probe's option: into method_args or probe_args, as text its owner converts)."""
    values = dict(values)
    known = {f.name for f in dataclasses.fields(cls)}
    for key, text in set_pairs(pairs):
        if key not in known and loose:
            moved = loose({**values, key: text})
            if key not in moved and any(isinstance(inner, dict) and key in inner for inner in moved.values()):
                values = moved  # an option of the run's method (method_args) or of a probe (probe_args)
                continue
        check_known(cls, [key], "--set")
        values[key] = convert(cls, key, text)
    return values


def set_pairs(pairs: tuple[str, ...]) -> list[tuple[str, str]]:
    """(field, text) of each `--set KEY=VALUE`, in order (KEY's dashes as underscores); one not KEY=VALUE refused."""
    split = []
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not KEY=VALUE (e.g. --set epochs=10).", param_hint="--set")
        split.append((key, text.strip()))
    return split


def check_known(cls, keys, where: str) -> None:
    known = [f.name for f in dataclasses.fields(cls)]
    for key in keys:
        if key not in known:
            raise ParameterError(f"{where}: unknown field '{key}'.{suggest(key, known)} Fields: {', '.join(known)}.")


def build_config(
    cls,
    options: dict,
    config: str | None,
    sets: tuple[str, ...],
    merge=("task_args",),
    resume=None,
    loose=None,
    echo=None,
):
    """`cls` from the file, the command's explicit options (None = not given) and the --set overrides.
    Mappings named in `merge` (task arguments) are updated key by key rather than replaced. `loose(values)`
    moves the keys that are no field of `cls` where they belong (a method's options, into method_args) before
    the rest are refused. With --resume, `resume(values)` lays what was given over the checkpoint's own config.
    `echo` gets the lines saying what came from the file (default: printed, by rank 0 alone); a command passes its
    own, to say them after its start line."""
    values, lines = ({}, []) if not config else file_values(cls, config, options, sets, loose)
    file_keys = list(values)
    check_known(cls, values, f"config file '{config}'")
    # YAML 1.1 reads 1e-3 as a string: such values take the field's type, as --set values do
    values = {
        k: convert(cls, k, v, f"config file '{config}'") if isinstance(v, (str, bool)) else v for k, v in values.items()
    }
    for key, value in options.items():
        if value is None or value == () or value == {}:
            continue
        values[key] = {**values.get(key, {}), **value} if key in merge and isinstance(value, dict) else value
    values = with_user_paths(apply_sets(cls, values, sets, loose))
    if resume and values.get("resume"):
        if values.get("force"):  # the two ask opposite things of the run in --out: neither is dropped silently
            raise ParameterError("--resume continues the run in --out and --force starts it over: give one of them.")
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
    try:
        built = cls(**values)
    except ParameterError as err:  # a bad value the file gave is named with the file, where the user must fix it
        raise ParameterError(in_file(str(err), config, set(file_keys) - given_here(options, sets))) from None
    if echo is None:
        from . import rank_zero_echo  # here: the package imports the commands, which import this module

        echo = rank_zero_echo(int(os.environ.get("RANK", "0")))
    for line in lines:
        echo(line)
    return built


def given_here(options: dict, sets: tuple[str, ...]) -> set[str]:
    """The fields the command line gives (its options and --set), over a config file's."""
    return {k for k, v in options.items() if v not in (None, (), {})} | {k for k, _ in set_pairs(sets)}


def in_file(message: str, config: str | None, keys: set[str]) -> str:
    """`message` led by the config file's name when it names a field only that file gave."""
    named = any(re.search(rf"\b{re.escape(key)}\b", message) for key in keys)
    return f"config file '{config}': {message}" if config and named else message


def file_values(cls, config: str, options: dict, sets: tuple[str, ...], loose=None) -> tuple[dict, list[str]]:
    """(values, lines): a config file's values as its run was given them (what it records as derived put back as
    asked: `given_values`), without the per-invocation options (--force, --resume: never a file's), and without
    its task's or method's arguments where the command line names another task or method; and the lines saying so."""
    raw = read_config_file(config)
    values, derived = given_values(raw)
    where, lines = f"config {config}", []
    if ignored := [f"{k}: {json.dumps(values[k])}" for k in PER_INVOCATION if values.get(k)]:
        lines.append(f"{where}: its {', '.join(ignored)} not taken; --force and --resume are given here only.")
    values = {k: v for k, v in values.items() if k not in PER_INVOCATION}
    chosen = {k: v for k, v in options.items() if v not in (None, (), {})} | dict(set_pairs(sets))
    if loose:  # a file's method options belong to the file's method; one naming none, to the command line's
        method = values.get("method") or chosen.get("method")
        values = loose({**values, **({"method": method} if method else {})})
    changed = {f"{k}_args" for k in ("task", "method") if values.get(k) and chosen.get(k, values[k]) != values[k]}
    for args in sorted(changed & set(values)):
        owner = args.removesuffix("_args")
        if names := ", ".join(values.pop(args)):
            lines.append(f"{where}: its {args} ({names}) are {owner} {values[owner]}'s, left out for {chosen[owner]}.")
    again = []
    for name, asked in sorted(derived.items()):
        if isinstance(asked, dict):  # a method's options: those this command line does not give
            keys = [k for k in asked if k not in chosen and k not in (options.get(name) or {})]
            again += [f"{name} ({len(keys)})"] if keys and name not in changed else []
        elif name not in chosen:
            again.append(name)
    said = "the settings it was given, under this command's options"
    if again:
        said += f"; derived again for this run (by the recipe, `auto` or the method): {', '.join(again)}"
    elif DERIVED not in raw:
        said = "every value as it gives it, under this command's options (it records none as derived)"
    lines.insert(0, f"{where}: {said}.")
    return values, lines


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
        help="Start from a .yaml or .json config (e.g. a run's OUT/config.json, whose recipe and auto values are "
        "derived again; --force and --resume are never taken from a file).",
        section="config",
    )(command)


def config_class(config: str) -> type:
    """'pretexts.engine.training.config:PretrainConfig' -> the class."""
    module, _, name = config.partition(":")
    return getattr(importlib.import_module(module), name)


def options_from(config: str):
    """Click options for every field of the config dataclass `config` ('module:Class') that declares its help
    (`engine.training.settings.setting`): `--field-name`, typed as the field, with the field's help, listed under
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
    extra = {k: v for k, v in f.metadata.items() if k not in ("help", "option", "choices", "nargs", "range")}
    kinds = typing.get_args(f.type) if isinstance(f.type, types.UnionType) else (f.type,)
    kind = next(t for t in kinds if t is not type(None))
    settings = {"default": None, "help": f.metadata["help"]}
    if f.default not in (None, (), dataclasses.MISSING) and kind is not bool:
        settings["show_default"] = shown(f.default)
    elif kind is bool and f.default is True:  # a flag pair (--tf32/--no-tf32): its default named as click names one
        settings["show_default"] = option_names(f)[0].split("/")[0][2:]
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
    if "range" in f.metadata:
        # shown as click shows an IntRange's; checked by the config (`check_ranges`), so the option, a config file
        # and --set are refused in the same words
        settings["shown_range"] = f.metadata["range"].shown()
    return {**settings, **extra}
