"""The Python API as a script uses it: a run continued with its saved settings (`Config.resuming`), and the errors
a user can cause answered in one line with the Python spelling: an infinite whole number, a finite-difference step
that is no step, an unknown probe or checkpoint kind, a tensor for a list of states, a probe argument for a probe
not run."""

import math

import pytest
import torch
from cli_runs import fails_cleanly, one_torch_thread  # noqa: F401 (autouse: one torch thread for tiny models)

import pretexts
from pretexts import engine
from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.evaluation.segmentation.train import run as segment
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.errors import CheckpointError, ParameterError, UnknownNameError

TINY = dict(backbone="test_convnext", batch_size=8, workers=0, quiet=True)
INF = float("inf")


# ---- continuing a run from Python ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A one-epoch run of one step in a task other than the default, so a default config differs from it."""
    out = tmp_path_factory.mktemp("resuming") / "run"
    cfg = pretexts.PretrainConfig(
        task="denoising",
        epochs=1,
        max_steps_per_epoch=1,
        eval_images=8,
        figure_images=2,
        monitor_every=0,
        out=str(out),
        **TINY,
    )
    pretexts.pretrain(cfg)
    return out


def test_resuming_continues_a_pretraining_run_with_its_saved_settings(pretrained):
    cfg = pretexts.PretrainConfig.resuming(pretrained, epochs=2)
    assert (cfg.task, cfg.backbone, cfg.batch_size, cfg.epochs, cfg.resume) == (
        "denoising",
        "test_convnext",
        8,
        2,
        "auto",
    )
    results = pretexts.pretrain(cfg)
    assert results["epochs"] == 2 and results["optimizer_steps"] == 2


@pytest.mark.parametrize(
    ("changes", "named"),
    [({"seed": 1}, "leave seed out of PretrainConfig.resuming"), ({"task": "random-mask"}, "leave task out")],
)
def test_resuming_refuses_a_change_of_the_run_in_one_line_as_it_is_built(pretrained, changes, named):
    with pytest.raises(CheckpointError, match=named):
        pretexts.PretrainConfig.resuming(pretrained, **changes)


def test_a_config_built_field_by_field_is_told_to_use_resuming(pretrained):
    cfg = pretexts.PretrainConfig(out=str(pretrained), resume="auto", epochs=3, **TINY)
    with pytest.raises(CheckpointError, match=r"task='denoising'.*PretrainConfig\.resuming\(out, \.\.\.\)"):
        pretexts.pretrain(cfg)


def test_a_refused_lr_the_run_derived_is_not_called_none(pretrained):
    with pytest.raises(
        CheckpointError, match=r"trained without lr \(the run derived it\), this run asks for 0.01"
    ) as err:
        pretexts.PretrainConfig.resuming(pretrained, lr=0.01)
    assert "lr=None" not in str(err.value)


def test_resuming_a_method_argument_names_it_as_python_spells_it(pretrained):
    cfg = pretexts.PretrainConfig.resuming(pretrained, method_args={"alpha": 0.2})
    with pytest.raises(CheckpointError, match=r"--alpha .*method_args\['alpha'\]"):
        pretexts.pretrain(cfg)


def test_resuming_without_a_checkpoint_or_with_force_or_an_unknown_field_is_refused(pretrained, tmp_path):
    with pytest.raises(CheckpointError, match=r"there is no checkpoint .*PretrainConfig\(out="):
        pretexts.PretrainConfig.resuming(tmp_path / "empty")
    with pytest.raises(ParameterError, match="force=True starts it over"):
        pretexts.PretrainConfig.resuming(pretrained, force=True)
    with pytest.raises(ParameterError, match="unknown field 'epoch'.*Did you mean: epochs"):
        pretexts.PretrainConfig.resuming(pretrained, epoch=3)
    with pytest.raises(CheckpointError, match="this command takes a fine-tuning run's checkpoint.pt"):
        engine.FinetuneConfig.resuming(pretrained)


def test_resuming_continues_a_finetuning_and_a_segmentation_run(tmp_path):
    out = tmp_path / "ft"
    first = engine.FinetuneConfig(
        from_scratch=True, epochs=1, max_steps_per_epoch=1, data="sample", recipe="small", out=str(out), **TINY
    )
    engine.finetune(first, echo=lambda line: None)
    more = engine.FinetuneConfig.resuming(out, epochs=2)
    assert (more.recipe, more.from_scratch, more.epochs) == ("small", True, 2)
    assert engine.finetune(more, echo=lambda line: None)["optimizer_steps"] == 2
    with pytest.raises(CheckpointError, match="leave lr out of FinetuneConfig.resuming"):
        engine.FinetuneConfig.resuming(out, lr=0.5)

    seg = tmp_path / "seg"
    segment(
        SegmentConfig(data="generated", head="linear", max_steps=1, out=str(seg), **{**TINY, "batch_size": 4}),
        log=lambda line: None,
    )
    again = SegmentConfig.resuming(seg, max_steps=2)  # a run --max-steps planned trains on with more of them
    assert (again.head, again.max_steps, again.resume) == ("linear", 2, "auto")
    assert segment(again, log=lambda line: None)["steps"] == 2
    with pytest.raises(CheckpointError, match="leave head out of SegmentConfig.resuming"):
        SegmentConfig.resuming(seg, head="upernet")


def test_the_run_functions_name_what_continues_a_stopped_run():
    for run in (engine.pretrain, engine.finetune):
        assert "resume=True" not in run.__doc__ and "resuming" in run.__doc__


def test_a_segmenter_checkpoint_refused_says_segment_resume_reads_it(tmp_path):
    path = tmp_path / "segmenter.pt"
    save_checkpoint({"kind": "segmenter", "config": {}, "model": {}}, path)
    with pytest.raises(CheckpointError, match="`pretexts segment --resume` continues it") as err:
        engine.load_checkpoint(path, kinds=("pretrain",))
    assert "no command reads it" not in str(err.value)


# ---- an infinite whole number ---------------------------------------------------------------------------------
def test_an_infinite_whole_number_is_a_parameter_error_naming_the_range():
    with pytest.raises(ParameterError, match=r"'count' must be a whole number in \[1, 1000\], got inf"):
        pretexts.create_pretext("random-mask", count=INF)
    with pytest.raises(ParameterError, match=r"'grid' must be a whole number in \[.*\], got -inf"):
        pretexts.create_pretext("gridded-mask", grid=-INF)
    with pytest.raises(ParameterError, match=r"probe linear: parameter 'epochs' must be a whole number"):
        engine.ProbeConfig(checkpoint="x", probe_args={"epochs": INF})
    with pytest.raises(ParameterError, match=r"must be float in \[1\.0, 2\.0\]"):
        pretexts.Param(1.0, float, 1.0, 2.0).convert("t", "x", 10**400)


def test_an_infinite_task_argument_in_a_config_file_is_one_line_and_exit_code_2(tmp_path):
    config = tmp_path / "inf.yaml"
    config.write_text("task: random-mask\ntask_args: {count: .inf}\n")
    fails_cleanly(["train", "--config", config, "--out", tmp_path / "x"], "'count' must be a whole number")


# ---- restore and restoration_loss -----------------------------------------------------------------------------
@pytest.mark.parametrize("fd_delta", [0.0, -1e-3, math.nan, INF, "small"])
def test_restore_refuses_a_finite_difference_step_outside_its_range(fd_delta):
    model = engine.create_energy_model("test_convnext", img_size=32).train()
    task = engine.prepare_task(pretexts.create_pretext("denoising"), model)
    sample = task(torch.rand(2, 3, 32, 32), torch.Generator().manual_seed(0))
    with pytest.raises(ParameterError, match="restore: parameter 'fd_delta'"):
        engine.restore(model, task, sample, grad_mode="finite-difference", fd_delta=fd_delta)


def test_restoration_loss_refuses_one_tensor_or_states_not_shaped_as_the_target():
    target = torch.rand(2, 3, 8, 8)
    with pytest.raises(ParameterError, match=r"got one tensor \(2, 3, 8, 8\); pass \[state\]"):
        engine.restoration_loss(torch.rand(2, 3, 8, 8), target)
    with pytest.raises(ParameterError, match=r"state 2 is \(2, 3, 4, 4\), the target \(2, 3, 8, 8\)"):
        engine.restoration_loss([torch.rand(2, 3, 8, 8), torch.rand(2, 3, 4, 4)], target)


# ---- names: probes, checkpoint kinds, the errors themselves ---------------------------------------------------
def test_an_unknown_probe_is_an_unknown_name_with_close_names():
    with pytest.raises(UnknownNameError, match="unknown probe 'lineer'. Did you mean: linear"):
        engine.ProbeConfig(checkpoint="x", probes=("lineer",))


def test_load_checkpoint_refuses_an_unknown_kind_naming_the_kinds(tmp_path):
    with pytest.raises(ParameterError, match="pretrain, finetune, finetuned, segmenter, got 'pretrained'"):
        engine.load_checkpoint(tmp_path / "missing.pt", kinds=("pretrained",))


def test_every_documented_error_is_reachable_from_pretexts():
    for name in ("OutputError", "NonFiniteLossError"):
        assert getattr(pretexts, name) is getattr(pretexts.errors, name)
        assert name in pretexts.__all__


def test_energy_histogram_names_out_as_python_spells_it():
    with pytest.raises(ParameterError, match=r"--out 'hist0' \(out= in Python\) must be a figure file"):
        engine.energy_histogram("missing.pt", "hist0")


# ---- a probe argument for a probe that is not run -------------------------------------------------------------
def test_a_probe_argument_of_a_probe_not_selected_is_refused_naming_how_to_select_it():
    with pytest.raises(ParameterError, match=r"read by probe knn or knn-std.*probes=\('linear', 'knn'\) in Python"):
        engine.ProbeConfig(checkpoint="x", probes=("linear",), probe_args={"knn_k": 5})
    assert engine.ProbeConfig(checkpoint="x", probes=("linear", "knn"), probe_args={"knn_k": 5}).probe_args


def test_the_cli_refuses_a_probe_flag_of_a_probe_not_selected(tmp_path):
    fails_cleanly(
        ["probe", "--checkpoint", tmp_path / "x.pt", "--probe", "linear", "--knn-k", "5"], "--probe knn", "--knn-k"
    )
