"""Optimiser recipes: `recipe="paper"` is the optimiser of the paper's Table A; explicit values win; bad names fail
clearly."""

import json

import pytest
import torch

from pretexts.engine import EnergyMethod, PretrainConfig
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.training.loop import build_optimizer
from pretexts.engine.training.recipes import RECIPES
from pretexts.errors import ParameterError


def test_paper_recipe_is_table_a_exactly():
    cfg = PretrainConfig(recipe="paper", batch_size=256)
    method = EnergyMethod(cfg, None, torch.device("cpu"))
    assert (
        cfg.base_lr,
        cfg.peak_lr,
        cfg.weight_decay,
        cfg.betas,
        method.args["alpha"],
        method.args["alpha_lr_scale"],
        cfg.schedule,
    ) == (1e-4, 1e-4, 0.05, (0.9, 0.95), 0.1, 1.0, "cosine")
    model = method.model = create_energy_model("vit_tiny", img_size=32, alpha=method.args["alpha"])
    optimizer = build_optimizer(method, cfg)
    assert optimizer.defaults["lr"] == 1e-4 and optimizer.defaults["betas"] == (0.9, 0.95)
    decays = sorted({g["weight_decay"] for g in optimizer.param_groups})
    assert decays == [0.0, 0.05]  # no decay on norms, biases and alpha (MAE's practice)
    assert all(g.get("lr_scale", 1.0) == 1.0 for g in optimizer.param_groups)
    assert model.alpha.item() == pytest.approx(0.1)


def test_fast_recipe_differs_only_in_the_documented_fields():
    paper, fast = RECIPES["paper"], RECIPES["fast"]
    assert {k for k in paper if paper[k] != fast[k]} == {"base_lr", "schedule"}
    by_method = EnergyMethod.recipe_defaults  # the energy method's own options that the recipe changes
    assert {k for k in by_method["paper"] if by_method["paper"][k] != by_method["fast"][k]} == {"alpha_lr_scale"}
    cfg = PretrainConfig()
    assert cfg.recipe == "fast" and cfg.base_lr == fast["base_lr"]
    assert EnergyMethod.parse_args(cfg)["alpha_lr_scale"] == by_method["fast"]["alpha_lr_scale"] == 400.0


def test_an_explicit_value_wins_over_the_recipe_and_is_saved(tmp_path):
    cfg = PretrainConfig(recipe="paper", base_lr=3e-3, method_args={"alpha": 0.5, "positions": "sincos"})
    args = EnergyMethod.parse_args(cfg)
    assert (cfg.base_lr, args["alpha"], args["alpha_lr_scale"]) == (3e-3, 0.5, 1.0)
    saved = json.loads(json.dumps(cfg.to_dict()))
    again = PretrainConfig.from_dict(saved)
    assert again == cfg and saved["recipe"] == "paper" and saved["base_lr"] == 3e-3


@pytest.mark.parametrize(
    "bad, message",
    [("papr", "Did you mean: paper"), ("PAPER", "Did you mean: paper"), ("mae", "recipes: paper, fast")],
)
def test_unknown_recipe_is_one_clear_error(bad, message):
    with pytest.raises(ParameterError, match=message):
        PretrainConfig(recipe=bad)


def test_recipe_values_are_still_checked():
    with pytest.raises(ParameterError, match=r"base_lr must be in \(0, 1\], got -1.0"):
        PretrainConfig(recipe="paper", base_lr=-1.0)
    with pytest.raises(ParameterError, match="schedule must be one of cosine, constant"):
        PretrainConfig(schedule="step")


def test_alpha_lr_scale_zero_keeps_alpha_at_its_start(tmp_path):
    """`--alpha-lr-scale 0`: the network trains, alpha stays at its initial value."""
    from tiny_trainers import tiny_trainer

    trainer = tiny_trainer(tmp_path, backbone="test_convnext", method_args={"alpha_lr_scale": 0.0})
    model = trainer.method.model
    before = [p.detach().clone() for p in model.backbone.parameters()]
    images = torch.rand(4, 3, 32, 32)
    for _ in range(3):
        trainer.train_step(images)
    assert model.alpha.item() == pytest.approx(0.1, abs=1e-7)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.backbone.parameters()))


def test_a_recipe_set_after_the_config_was_built_is_refused_at_the_start_and_so_is_a_bad_value():
    """`cfg.recipe = "paper"` after `PretrainConfig()` would run fast's lr as if given; `cfg.batch_size = -5` skipped
    the checks the constructor runs. Both are refused before anything is written."""
    from pretexts.engine.training.loop import Pretrainer

    cfg = PretrainConfig()
    cfg.recipe = "paper"
    with pytest.raises(ParameterError, match=r"recipe was set to 'paper' after .* recipe 'fast'.*PretrainConfig\("):
        Pretrainer(cfg)
    cfg = PretrainConfig()
    cfg.batch_size = -5
    with pytest.raises(ParameterError, match=r"batch_size must be in \[1, 65536\], got -5"):
        Pretrainer(cfg)
