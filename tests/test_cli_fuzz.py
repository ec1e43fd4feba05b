"""Hypothesis feeds every `pretexts` command random bad options: each answer is one `Error:` line and exit
code 2, never a traceback. Bad values are names that are no task, backbone, probe or RandAugment policy, task
arguments outside their ranges, the number options of restore and energy (<= 0, or text), and missing files. The
number options of train, finetune, probe, segment and compare, and the methods' and probes' own, are drawn from
their declared ranges in tests/test_option_fuzz.py."""

import string

import pytest
import timm
from click.testing import CliRunner
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from pretrained_checkpoints import write_checkpoint

from pretexts import get_pretext_class, list_pretexts
from pretexts.backbones import ALIASES
from pretexts.cli import main

FUZZ = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))

NOT_POSITIVE = st.integers(-(10**6), 0)
NEGATIVE = st.integers(-(10**6), -1)
TEXT = st.text(string.ascii_letters + "-_", min_size=1, max_size=12).filter(lambda s: not s.startswith("-"))
NOT_A_NUMBER = TEXT.filter(lambda s: s.lower() not in ("inf", "infinity", "nan", "e", "-e"))


def not_a_task(name: str) -> bool:
    return name not in list_pretexts()


def not_a_backbone(name: str) -> bool:
    return name not in ALIASES and not timm.is_model(name)


def options(positive=(), non_negative=()) -> st.SearchStrategy:
    """[option, bad value] for one whole-number option of the given kinds, or text."""

    def draw(option, bad):
        return st.one_of(bad, NOT_A_NUMBER).map(lambda v: [option, str(v)])

    kinds = [(o, NOT_POSITIVE) for o in positive] + [(o, NEGATIVE) for o in non_negative]
    return st.one_of(*[draw(o, bad) for o, bad in kinds])


def bad_task_args() -> st.SearchStrategy:
    """--task T --task-arg key=value with an unknown key, or a known key out of its range or of the wrong type."""

    def for_task(task):
        params = get_pretext_class(task).params
        unknown = TEXT.filter(lambda k: k.replace("-", "_") not in params).map(lambda k: [f"{k}=1"])
        numeric = [k for k, p in params.items() if p.kind in (int, float) and p.high is not None]
        cases = [unknown]
        if numeric:
            key = st.sampled_from(numeric)
            cases.append(
                key.flatmap(
                    lambda k: st.one_of(
                        st.floats(params[k].high + 1, params[k].high + 1e6).map(lambda v: [f"{k}={v:g}"]),
                        NOT_A_NUMBER.map(lambda v: [f"{k}={v}"]),
                    )
                )
            )
        return st.one_of(*cases).map(lambda kv: ["--task", task, "--task-arg", kv[0]])

    return st.sampled_from([t for t in list_pretexts() if t != "mixed"]).flatmap(for_task)


NAMES = st.one_of(
    TEXT.filter(not_a_task).map(lambda n: ["--task", n]), TEXT.filter(not_a_backbone).map(lambda n: ["--backbone", n])
)

RESTORE = options(positive=("--images", "--steps"))
ENERGY = options(positive=("--images", "--steps"), non_negative=("--workers",))
RANDAUG = TEXT.filter(lambda s: not s.startswith("rand") and s.lower() not in ("none", "off"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(write_checkpoint(tmp_path_factory.mktemp("fuzz") / "checkpoint.pt")[0])


def assert_one_line_error(args: list) -> None:
    note(" ".join(args))
    result = CliRunner().invoke(main, args)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == 2, result.output
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


@FUZZ
@given(st.one_of(NAMES, bad_task_args()))
def test_train_refuses_bad_options_in_one_line(tmp_path_factory, bad):
    assert_one_line_error(["train", "--out", str(tmp_path_factory.mktemp("train")), *bad])


@FUZZ
@given(RANDAUG.map(lambda s: ["--randaug", s]))
def test_finetune_refuses_bad_options_in_one_line(tmp_path_factory, checkpoint, bad):
    out = str(tmp_path_factory.mktemp("finetune"))
    assert_one_line_error(["finetune", "--checkpoint", checkpoint, "--out", out, *bad])


@FUZZ
@given(TEXT.filter(lambda s: s not in ("linear", "mlp", "knn")).map(lambda s: ["--probe", s]))
def test_probe_refuses_bad_options_in_one_line(tmp_path_factory, checkpoint, bad):
    assert_one_line_error(["probe", "--checkpoint", checkpoint, "--out", str(tmp_path_factory.mktemp("probe")), *bad])


@FUZZ
@given(st.one_of(RESTORE, NAMES.filter(lambda a: a[0] == "--task"), bad_task_args()))
def test_restore_refuses_bad_options_in_one_line(tmp_path_factory, checkpoint, bad):
    out = tmp_path_factory.mktemp("restore") / "fig.png"
    assert_one_line_error(["restore", "--checkpoint", checkpoint, "--out", str(out), *bad])


@FUZZ
@given(st.one_of(ENERGY, NAMES.filter(lambda a: a[0] == "--task"), bad_task_args()))
def test_energy_refuses_bad_options_in_one_line(tmp_path_factory, checkpoint, bad):
    out = tmp_path_factory.mktemp("energy") / "fig.png"
    assert_one_line_error(["energy", "--checkpoint", checkpoint, "--out", str(out), *bad])


@FUZZ
@given(st.sampled_from(["train", "finetune", "probe", "restore", "energy", "export"]), TEXT)
def test_every_command_refuses_missing_checkpoints_and_data(tmp_path_factory, command, name):
    missing = str(tmp_path_factory.mktemp("missing") / name)
    args = {
        "train": ["train", "--data", missing],
        "finetune": ["finetune", "--checkpoint", missing],
        "probe": ["probe", "--checkpoint", missing],
        "export": ["export", "--checkpoint", missing, "--out", "x.pt"],
        "restore": ["restore", "--checkpoint", missing, "--out", "x.png"],
        "energy": ["energy", "--checkpoint", missing, "--out", "x.png"],
    }[command]
    assert_one_line_error(args)
