"""The AE and SimMIM start a ViT from the energy's positions: `positions` auto is the fixed 2D sin-cos table, frozen,
the same the energy method and MAE start from (and `pretexts compare`'s random-init row), so no arm of a comparison
starts with an advantage the others lack; `positions=learned` keeps timm's random draw, a CNN is left as it is, and
the run records what auto resolved to."""

import json

import pytest
import torch
from cli_runs import one_torch_thread, run_cli  # noqa: F401 (autouse: one torch thread)

from pretexts import create_pretext
from pretexts.backbones import create_backbone
from pretexts.backbones.vit_tokens import starting_positions
from pretexts.engine import PretrainConfig, create_energy_model
from pretexts.engine.methods.autoencoder import AutoencoderMethod
from pretexts.engine.methods.simmim import SimMIMMethod
from pretexts.errors import ParameterError

METHODS = {"ae": AutoencoderMethod, "simmim": SimMIMMethod}


def built(method: str, backbone: str, **method_args):
    """The method's model as a run builds it (seed 0), and the method with its resolved arguments."""
    cfg = PretrainConfig(method=method, backbone=backbone, img_size=32, method_args=method_args)
    runner = METHODS[method](cfg, create_pretext(cfg.task), torch.device("cpu"))
    torch.manual_seed(0)
    return runner.setup(), runner


@pytest.mark.parametrize("method", ["ae", "simmim"])
@pytest.mark.parametrize("backbone", ["test_vit", "vit_tiny"])
def test_a_vit_starts_from_the_energys_frozen_sincos_table(method, backbone):
    model, runner = built(method, backbone)
    energy = create_energy_model(backbone, img_size=32)  # positions auto, as `pretexts train` runs it
    assert runner.args["positions"] == "sincos" and runner.resolved == {"positions": "sincos"}
    assert starting_positions(model.backbone) == "sincos"
    assert torch.equal(model.backbone.pos_embed, energy.backbone.pos_embed)
    assert not model.backbone.pos_embed.requires_grad
    trained = {id(p) for group in runner.param_groups() for p in group["params"]}
    assert id(model.backbone.pos_embed) not in trained  # the optimiser never moves the table


@pytest.mark.parametrize("method", ["ae", "simmim"])
def test_positions_learned_keeps_timms_random_draw(method):
    model, runner = built(method, "test_vit", positions="learned")
    torch.manual_seed(0)
    timm_own = create_backbone("test_vit", img_size=32).pos_embed
    assert runner.args["positions"] == "learned" and starting_positions(model.backbone) == "learned"
    assert torch.equal(model.backbone.pos_embed, timm_own) and model.backbone.pos_embed.requires_grad


@pytest.mark.parametrize("method", ["ae", "simmim"])
def test_a_cnn_is_left_as_it_is_and_sincos_on_it_is_refused(method):
    model, runner = built(method, "test_resnet")
    torch.manual_seed(0)
    plain = create_backbone("test_resnet", img_size=32).state_dict()
    assert runner.args["positions"] == "learned" and runner.resolved == {}
    assert all(torch.equal(value, plain[key]) for key, value in model.backbone.state_dict().items())
    with pytest.raises(ParameterError, match=f"method {method}: positions=sincos .* test_resnet has none"):
        built(method, "test_resnet", positions="sincos")


@pytest.mark.parametrize("method", ["ae", "simmim"])
def test_train_lists_the_option_and_records_what_auto_resolved_to(method, tmp_path):
    result, _ = run_cli(["train", "--method", method, "--help"])
    assert result.exit_code == 0 and "--positions [auto|learned|sincos]" in result.output
    args = ["train", "--method", method, "--backbone", "test_vit", "--batch-size", "8", "--epochs", "1"]
    args += ["--max-steps-per-epoch", "1", "--workers", "0", "--monitor-every", "0", "--out", tmp_path / "run"]
    result, error = run_cli(args)
    assert result.exit_code == 0, error or result.output
    assert f"{method}: positions sincos" in result.output  # the start line
    assert json.loads((tmp_path / "run" / "config.json").read_text())["method_args"]["positions"] == "sincos"


def test_a_checkpoint_that_records_no_positions_is_refused_as_an_earlier_builds(tmp_path):
    """A checkpoint from before the method had the argument: "leave --positions out" could not help."""
    import torch

    from pretexts.engine.training.checkpoint import save_checkpoint

    args = ["train", "--method", "ae", "--backbone", "test_vit", "--batch-size", "8", "--epochs", "2"]
    args += ["--max-steps-per-epoch", "1", "--workers", "0", "--monitor-every", "0", "--out", tmp_path / "run"]
    result, error = run_cli([*args[:8], "1", *args[9:]])  # one epoch of the two
    assert result.exit_code == 0, error or result.output
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)
    method_args = {k: v for k, v in ckpt["config"]["method_args"].items() if k != "positions"}
    save_checkpoint({**ckpt, "config": {**ckpt["config"], "method_args": method_args}}, tmp_path / "old.pt")
    result, error = run_cli([*args[:-1], tmp_path / "resumed", "--resume", tmp_path / "old.pt"])
    line = (error or result.output).strip().splitlines()[-1]
    assert result.exit_code == 2 and "records no positions" in line and "an earlier build" in line, line
    assert "leave it out" not in line and "--force" in line
