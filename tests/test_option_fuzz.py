"""Every number option of every config command (train, finetune, probe, segment, compare), every method's and every
probe's, is bounded where it is declared, and hypothesis draws its values from that declaration: one just outside
gets one `Error:` line naming the range and exit code 2 (through the option and through --set); one inside builds the
command's config. Nothing runs: the step after the config (Pretrainer, Finetuner, ...) is replaced by one that stops
with the config it was given. A field or param without a range fails `test_every_number_*_declares_a_range`."""

import dataclasses
import string
import types
import typing
from unittest import mock

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pretexts import get_pretext_class, list_pretexts
from pretexts.cli import main
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.evaluation.finetune_config import FinetuneConfig
from pretexts.engine.evaluation.probe_config import BUILTIN_PROBE_PARAMS, ProbeConfig, declared_probe_params
from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.settings import Range
from pretexts.params import Param
from pretexts.registry import METHODS

FUZZ = settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


class Built(Exception):
    """Raised by the stand-in for the step after the config: the command got this far with `cfg`."""

    def __init__(self, cfg):
        super().__init__("built")
        self.cfg = cfg


def stop_pretrainer(cfg, *args, **kwargs):
    METHODS.get(cfg.method).parse_args(cfg)  # the method's options, checked where Pretrainer checks them
    raise Built(cfg)


def stop(cfg, *args, **kwargs):
    raise Built(cfg)


# command -> its config, the options it needs to build one, and the step after the config (replaced by `stop`)
COMMANDS = {
    "train": (PretrainConfig, [], "pretexts.engine.training.loop.Pretrainer", stop_pretrainer),
    "finetune": (
        FinetuneConfig,
        ["--from-scratch", "--backbone", "resnet18"],
        "pretexts.engine.evaluation.finetune.Finetuner",
        stop,
    ),
    "probe": (
        ProbeConfig,
        ["--from-scratch", "--backbone", "resnet18"],
        "pretexts.engine.evaluation.probe.run_probe",
        stop,
    ),
    "segment": (
        SegmentConfig,
        ["--data", "generated", "--from-scratch", "--backbone", "resnet18"],
        "pretexts.engine.evaluation.segmentation.train.Segmentation",
        stop,
    ),
    "compare": (CompareConfig, [], "pretexts.engine.compare.run.compare", stop),
}

# options a value inside its range needs beside it, where another field bounds it (min_lr <= the peak lr, the
# micro-batches divide the batch, the heads divide the width)
COMPANIONS = {
    ("train", "min_lr"): lambda v: ["--lr", "1"],
    ("finetune", "min_lr"): lambda v: ["--lr", "1"],
    ("finetune", "accum_iter"): lambda v: ["--batch-size", str(v)],
    ("ae", "decoder_dim"): lambda v: ["--decoder-heads", "1"],
    ("ae", "decoder_heads"): lambda v: ["--decoder-dim", str(v * 8)],
}


def number_kind(f: dataclasses.Field) -> type | None:
    """int or float for a number field, or a tuple field of numbers (betas, budget, seeds); None otherwise."""
    kinds = typing.get_args(f.type) if isinstance(f.type, types.UnionType) else (f.type,)
    for kind in kinds:
        if kind in (int, float):
            return kind
        if kind is tuple:
            if "nargs" in f.metadata:
                return float
            items = f.default if isinstance(f.default, tuple) else ()
            if items and all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in items):
                return type(items[0])
            bounds = f.metadata.get("range")
            if not items and bounds is not None:  # empty by default (compare's --steps): its range's kind
                return int if isinstance(bounds.low, int) and isinstance(bounds.high, int) else float
    return None


def number_fields(command: str) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(COMMANDS[command][0]) if number_kind(f)]


FIELD_CASES = [(command, f.name) for command in COMMANDS for f in number_fields(command)]


def method_params() -> list[tuple[str, str, Param]]:
    METHODS.load()
    return [
        (name, key, param)
        for name in METHODS.table
        for key, param in METHODS.get(name).method_params.items()
        if param.kind in (int, float)
    ]


def probe_params() -> list[tuple[str, str, Param]]:
    return [
        (probe, key, param)
        for key, owners in declared_probe_params().items()
        for probe, param in owners
        if param.kind in (int, float)
    ]


def task_params() -> list[tuple[str, str, Param]]:
    return [
        (task, key, param)
        for task in list_pretexts()
        for key, param in get_pretext_class(task).params.items()
        if param.kind in (int, float)
    ]


def outside(bounds: Range, kind: type) -> st.SearchStrategy:
    """A value just below or just above `bounds`, or far outside it."""
    if kind is int:
        low = bounds.low if bounds.low_open else bounds.low - 1
        high = bounds.high if bounds.high_open else bounds.high + 1
        return st.one_of(st.integers(low - 10**9, low), st.integers(high, high + 10**9))
    below = st.floats(bounds.low - 1e6, bounds.low, exclude_max=not bounds.low_open)
    above = st.floats(bounds.high, bounds.high + 1e6 * max(1, bounds.high), exclude_min=not bounds.high_open)
    return st.one_of(below, above).filter(lambda v: v not in bounds)


def inside(bounds: Range, kind: type) -> st.SearchStrategy:
    if kind is int:
        return st.integers(bounds.low + bounds.low_open, bounds.high - bounds.high_open)
    return st.floats(bounds.low, bounds.high, exclude_min=bounds.low_open, exclude_max=bounds.high_open)


def param_range(param: Param) -> Range:
    return Range(param.low, param.high)


def flag_of(f: dataclasses.Field) -> str:
    return f.metadata.get("option", "--" + f.name.replace("_", "-"))


def as_option(f: dataclasses.Field, value) -> list[str]:
    """The command-line words that give field `f` the value (each item of a pair, as betas)."""
    if "nargs" in f.metadata:
        return [flag_of(f), *[repr(value)] * f.metadata["nargs"]]
    return [f"{flag_of(f)}={value!r}"]


def as_set(f: dataclasses.Field, value) -> list[str]:
    """--set, the path a config file's value takes (`build_config`, then the dataclass's checks)."""
    many = f.metadata.get("nargs", 1)
    listed = "nargs" in f.metadata or number_kind(f) is not None and f.type in (tuple, tuple | None)
    text = f"[{', '.join([repr(value)] * many)}]" if listed else repr(value)
    return ["--set", f"{f.name}={text}"]


def invoke(command: str, words: list[str]):
    cls, needed, target, stand_in = COMMANDS[command]
    args = [command, *needed, *words]
    with mock.patch(target, stand_in):
        return CliRunner().invoke(main, args)


def assert_refused(result, *ranges: str) -> None:
    """One `Error:` line naming one of `ranges`, exit code 2, and nothing run."""
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert not isinstance(result.exception, Built), "accepted"
    assert result.exit_code == 2, result.output
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert any(r in errors[0] for r in ranges), (errors[0], ranges)


def assert_built(result) -> object:
    assert isinstance(result.exception, Built), result.output or result.exception
    return result.exception.cfg


def field_named(command: str, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(COMMANDS[command][0]) if f.name == name)


@pytest.mark.parametrize("command,name", FIELD_CASES)
def test_every_number_field_declares_a_range(command, name):
    """A new number option cannot ship without bounds; its default lies inside them."""
    f = field_named(command, name)
    bounds = f.metadata.get("range")
    assert isinstance(bounds, Range), f"{command}: field '{name}' declares no range (setting(..., range=...))"
    defaults = f.default if isinstance(f.default, tuple) else (f.default,)
    assert all(d in bounds for d in defaults if d not in (None, dataclasses.MISSING)), (name, f.default, bounds)
    option = next(p for p in main.commands[command].params if p.name == name)
    shown = option.get_help_record(click.Context(main.commands[command]))[1]
    assert f"{bounds.shown()}]" in shown, shown  # --help: `[default: X; 0<=x<1]`


@pytest.mark.parametrize(
    "owner,key,param",
    [*method_params(), *probe_params(), *task_params()],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_every_number_param_declares_a_range(owner, key, param):
    """A method's, a probe's and a task's number params are bounded at both ends, their default inside."""
    assert param.low is not None and param.high is not None, f"{owner}: param '{key}' has no upper or lower bound"
    if param.default is not None and not isinstance(param.default, tuple):
        assert param.low <= param.default <= param.high or param.scaled, (owner, key, param)


@pytest.mark.parametrize("command,name", FIELD_CASES)
@FUZZ
@given(data=st.data())
def test_a_field_outside_its_range_is_one_line(command, name, data):
    f = field_named(command, name)
    bounds = f.metadata["range"]
    value = data.draw(outside(bounds, number_kind(f)))
    words = as_set(f, value) if data.draw(st.booleans(), label="through --set") else as_option(f, value)
    # the command line names the flag beside the field (a config file's key)
    assert_refused(invoke(command, words), f"{flag_of(f)} ({name}) must be in {bounds.interval()}, got ")


@pytest.mark.parametrize("command,name", FIELD_CASES)
@FUZZ
@given(data=st.data())
def test_a_field_inside_its_range_builds_the_config(command, name, data):
    f = field_named(command, name)
    value = data.draw(inside(f.metadata["range"], number_kind(f)))
    companions = COMPANIONS.get((command, name), lambda v: [])(value)
    cfg = assert_built(invoke(command, [*as_option(f, value), *companions]))
    given_value = getattr(cfg, name)
    assert value in given_value if isinstance(given_value, tuple) else given_value == value


NOT_A_NUMBER = st.text(string.ascii_letters + "_", min_size=1, max_size=10).filter(
    lambda s: (
        s.lower() not in ("inf", "infinity", "nan", "e", "none", "null", "true", "false", "yes", "no", "on", "off")
    )
)


@pytest.mark.parametrize("command,name", FIELD_CASES)
@FUZZ
@given(text=NOT_A_NUMBER)
def test_a_field_given_text_is_one_line(command, name, text):
    f = field_named(command, name)
    words = [f"--set={f.name}={text}"] if "nargs" in f.metadata else [f"{flag_of(f)}={text}"]
    assert_refused(invoke(command, words), f.name.replace("_", "-"), f.name)


def method_words(method: str, key: str, text: str) -> list[str]:
    """`train --method M --key=TEXT`, or --method-arg where a config field has the option's name."""
    taken = key in PretrainConfig.__dataclass_fields__
    return [
        "--method",
        method,
        *(["--method-arg", f"{key}={text}"] if taken else [f"--{key.replace('_', '-')}={text}"]),
    ]


@pytest.mark.parametrize("method,key,param", method_params(), ids=lambda v: v if isinstance(v, str) else "")
@FUZZ
@given(data=st.data())
def test_a_method_option_outside_its_range_is_one_line(method, key, param, data):
    value = data.draw(outside(param_range(param), param.kind))
    assert_refused(invoke("train", method_words(method, key, repr(value))), f"[{param.low}, {param.high}]")


@pytest.mark.parametrize("method,key,param", method_params(), ids=lambda v: v if isinstance(v, str) else "")
@FUZZ
@given(data=st.data())
def test_a_method_option_inside_its_range_builds(method, key, param, data):
    value = data.draw(inside(param_range(param), param.kind))
    companions = COMPANIONS.get((method, key), lambda v: [])(value)
    cfg = assert_built(invoke("train", [*method_words(method, key, repr(value)), *companions]))
    assert METHODS.get(method).parse_args(cfg)[key] == value


def probe_words(key: str, text: str) -> list[str]:
    """`probe --key=TEXT` for a built-in probe's option, else --probe-arg."""
    return [f"--{key.replace('_', '-')}={text}"] if key in BUILTIN_PROBE_PARAMS else ["--probe-arg", f"{key}={text}"]


@pytest.mark.parametrize("probe,key,param", probe_params(), ids=lambda v: v if isinstance(v, str) else "")
@FUZZ
@given(data=st.data())
def test_a_probe_option_outside_its_range_is_one_line(probe, key, param, data):
    value = data.draw(outside(param_range(param), param.kind))
    assert_refused(invoke("probe", probe_words(key, repr(value))), f"[{param.low}, {param.high}]")


@pytest.mark.parametrize("probe,key,param", probe_params(), ids=lambda v: v if isinstance(v, str) else "")
@FUZZ
@given(data=st.data())
def test_a_probe_option_inside_its_range_builds(probe, key, param, data):
    value = data.draw(inside(param_range(param), param.kind))
    cfg = assert_built(invoke("probe", ["--probe", probe, *probe_words(key, repr(value))]))
    got = cfg.probe_params(probe)[key]
    assert value in got if isinstance(got, tuple) else got == value


@pytest.mark.parametrize(
    "owner,key,param", [*method_params(), *probe_params()], ids=lambda v: v if isinstance(v, str) else ""
)
@FUZZ
@given(text=NOT_A_NUMBER)
def test_a_method_or_probe_option_given_text_is_one_line(owner, key, param, text):
    if owner in METHODS.table:
        result = invoke("train", method_words(owner, key, text))
    else:
        result = invoke("probe", probe_words(key, text))
    assert_refused(result, key.replace("_", "-"), key)


# the audit's cases (issue 37): each ran before its bound was declared
AUDIT_CASES = {
    "finetune --drop-path 2 (a traceback from bernoulli_)": ("finetune", ["--drop-path", "2"], "[0, 1)"),
    "finetune drop_path: 2 in a config": ("finetune", ["--set", "drop_path=2"], "[0, 1)"),
    "train --workers 10000 (600 loader processes, 23 GB)": ("train", ["--workers", "10000"], "[0, 64]"),
    "train workers: 10000 in a config": ("train", ["--set", "workers=10000"], "[0, 64]"),
    "train --steps 1000000000 (the energy method's N: a silent hang)": (
        "train",
        ["--steps", "1000000000"],
        "[0, 64]",
    ),
    "train steps: 1000000000 in a config": ("train", ["--set", "steps=1000000000"], "[0, 64]"),
}


@pytest.mark.parametrize("case", AUDIT_CASES)
def test_the_audits_unbounded_options_are_refused_in_one_line(case):
    command, words, shown = AUDIT_CASES[case]
    assert_refused(invoke(command, words), shown)
