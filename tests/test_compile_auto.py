"""`--compile auto`, the default: compiled only where measured faster (the energy method's exact step on a ViT, on the
CPU in float32) over a run long enough to repay the compile; a backend asked for is used, `off` runs eagerly; the
config records what was chosen and the start line says why."""

import json

import pytest
from click.testing import CliRunner
from tiny_trainers import tiny_trainer

from pretexts.cli import main
from pretexts.engine.training import compile_choice
from pretexts.engine.training.compile_choice import BACKEND, choose_compile
from pretexts.engine.training.config import PretrainConfig
from pretexts.errors import ParameterError

MEASURED = dict(measured_gain=0.56, device_type="cpu", autocast=False, batch_size=32, img_size=32)


@pytest.fixture
def real_margin(monkeypatch, eager_unless_asked):
    """The rule's own margin (conftest runs every other test eagerly)."""
    monkeypatch.setattr(compile_choice, "MARGIN", eager_unless_asked)


def test_auto_compiles_a_measured_step_once_the_run_repays_it(real_margin):
    needed = compile_choice.MARGIN * compile_choice.BREAK_EVEN_WORK // (32 * 32 * 32)  # steps at batch 32, 32 px
    short = choose_compile("auto", planned_steps=needed - 1, **MEASURED)
    assert short.backend is None and f"pays from about {needed} steps" in short.why
    assert choose_compile("auto", planned_steps=needed, **MEASURED).backend == BACKEND
    # twice the images per step: half the steps repay it
    assert choose_compile("auto", planned_steps=needed // 2, **{**MEASURED, "batch_size": 64}).backend == BACKEND


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"measured_gain": None}, "not measured faster compiled"),
        ({"device_type": "cuda"}, "on cuda is not measured"),
        ({"autocast": True}, "under autocast"),
        ({"planned_steps": None}, "length is not known"),
    ],
)
def test_auto_stays_eager_where_nothing_was_measured_to_pay(real_margin, change, reason):
    choice = choose_compile("auto", **{"planned_steps": 10**6, **MEASURED, **change})
    assert choice.backend is None and reason in choice.why and choice.describe().startswith("compile: off (auto: ")


def test_a_backend_asked_for_is_used_and_off_runs_eagerly():
    assert choose_compile("aot_eager", planned_steps=1, **{**MEASURED, "measured_gain": None}).backend == "aot_eager"
    assert choose_compile(None, planned_steps=10**6, **MEASURED).describe() == "compile: off (--compile off)"


def test_the_config_defaults_to_auto_and_reads_off_as_eager():
    assert PretrainConfig().compile == "auto"
    assert PretrainConfig(compile="off").compile is None and PretrainConfig(compile="None").compile is None
    with pytest.raises(ParameterError, match="auto .* compiles where it pays; off runs eagerly"):
        PretrainConfig(compile="inductr")


@pytest.mark.parametrize(
    "overrides, compiled",
    [
        ({"backbone": "vit_tiny", "epochs": 200}, True),  # 512 synthetic images: 16 steps of 32 an epoch
        ({"backbone": "vit_tiny", "epochs": 1}, False),
        ({"backbone": "vit_tiny", "epochs": 200, "method_args": {"grad_mode": "finite-difference"}}, False),
        ({"backbone": "convnext_atto", "epochs": 200}, False),
        ({"backbone": "vit_tiny", "epochs": 200, "method": "ae"}, False),
    ],
)
def test_a_trainer_resolves_auto_from_its_backbone_method_and_length(tmp_path, real_margin, overrides, compiled):
    trainer = tiny_trainer(tmp_path, batch_size=32, img_size=32, **overrides)
    steps = trainer.cfg.epochs * trainer.steps_per_epoch
    assert (trainer.record.compile == BACKEND) is compiled, (steps, trainer.compile_choice.why)
    if compiled:  # the compiled restoration step is built (compiling happens at its first call, not here)
        assert trainer.method.compiled is not None
        assert steps * 32 * 32**2 >= compile_choice.MARGIN * compile_choice.BREAK_EVEN_WORK
    else:
        assert getattr(trainer.method, "compiled", None) is None
        assert trainer.compile_choice.why.startswith("auto: ")


def test_the_start_line_says_what_auto_chose_and_config_json_records_it(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--backbone", "test_convnext", "--batch-size", "8", "--epochs", "1", "--max-steps-per-epoch", "1"]
    args += ["--out", out]
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    assert "compile: off (auto: this method's step on this backbone was not measured faster compiled)" in result.output
    assert json.loads((out / "config.json").read_text())["compile"] is None
