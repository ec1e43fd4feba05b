"""An energy read from several blocks (`--method-arg read_layers=K`): which blocks it reads, that it is the
paper's energy plus the earlier blocks' heads, that the restoration gradient reaches the lower blocks through
them, and the refusals."""

import pytest
import torch
from tiny_trainers import small_energy_method
from torch import nn

import pretexts
from pretexts.backbones.factory import create_backbone
from pretexts.engine import create_energy_model
from pretexts.engine.evaluation.from_checkpoint import load_energy_model
from pretexts.engine.methods.energy.layers import read_indices
from pretexts.engine.methods.energy.method import EnergyMethod
from pretexts.engine.methods.energy.restore import restoration_loss, restore
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.engine.training.config import PretrainConfig
from pretexts.errors import ParameterError


def test_the_blocks_read_spread_over_the_depth_and_end_at_the_last():
    vit = create_backbone("vit_tiny", img_size=32)
    assert read_indices(vit, 1, "vit_tiny") == ()
    assert read_indices(vit, 3, "vit_tiny") == (3, 7)  # after blocks 4 and 8; the head reads block 12
    assert read_indices(vit, 4, "vit_tiny") == (2, 5, 8)
    assert read_indices(vit, 12, "vit_tiny") == tuple(range(11))
    assert read_indices(create_backbone("convnext_atto"), 2, "convnext_atto") == (1,)  # after its second stage
    with pytest.raises(ParameterError, match="give 1 to 12"):
        read_indices(vit, 13, "vit_tiny")
    with pytest.raises(ParameterError, match="use read_layers=1"):
        read_indices(nn.Sequential(nn.Flatten()), 2, "a plain module")


def model(read_layers: int, depth: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=depth, read_layers=read_layers)


def test_it_is_the_papers_energy_plus_the_earlier_blocks_heads(real_images):
    energy_model = model(read_layers=2)
    paper = energy_model.score(energy_model.backbone(energy_model.normalize(real_images)))
    with_reads = energy_model.energy(real_images)
    assert with_reads.shape == (len(real_images),)
    assert not torch.allclose(with_reads, paper, atol=1e-4)  # the earlier block's head adds to it
    nn.init.zeros_(energy_model.layer_reads.heads[0].weight)
    torch.testing.assert_close(energy_model.energy(real_images), paper, atol=1e-5, rtol=1e-5)
    assert model(read_layers=1).layer_reads is None  # the paper's model: no extra weights in its checkpoint


def test_the_restoration_gradient_reaches_the_blocks_read_directly(real_images):
    """With the last block's head silenced, only the head on block 2 of 4 (read_layers=2) is left: the restoration
    moves the masked images and trains blocks 1 and 2 through it, and blocks 3 and 4, which it does not read,
    get no gradient."""
    task = pretexts.create_pretext("random-mask")
    generator = torch.Generator().manual_seed(0)
    for read_layers, moves in ((1, False), (2, True)):
        energy_model = model(read_layers)
        nn.init.zeros_(energy_model.head.weight)
        sample = task(real_images, generator)
        states = restore(energy_model, task, sample, 1)
        assert torch.any(states[-1] != sample.state) == moves
        restoration_loss(states, sample.target, "mse").backward()
        grads = [block.mlp.fc1.weight.grad for block in energy_model.backbone.blocks]
        reached = [grad is not None and grad.abs().sum() > 0 for grad in grads]
        assert reached == ([True, True, False, False] if moves else [False] * 4), read_layers


def energy_method(task: str = "random-mask", **method_args) -> EnergyMethod:
    """The energy method on `model`'s small ViT, with `read_layers` from its arguments."""
    return small_energy_method(lambda args: model(args["read_layers"]), task, **method_args)


def test_the_option_is_parsed_in_its_range_and_the_paper_by_default():
    assert energy_method().args["read_layers"] == 1
    assert energy_method(read_layers="3").args["read_layers"] == 3
    with pytest.raises(ParameterError, match="read_layers"):
        energy_method(read_layers=0)


def test_a_task_whose_state_is_no_image_is_refused():
    with pytest.raises(ParameterError, match="use read_layers=1"):
        energy_method(task="patch-sorting", read_layers=2).setup(planned_steps=1)


def test_a_training_step_and_the_monitor_read_every_head(real_images):
    method = energy_method(read_layers=3)
    energy_model = method.setup(planned_steps=1)
    method.loss(method.task(real_images, torch.Generator().manual_seed(0))).backward()
    assert all(head.weight.grad.abs().sum() > 0 for head in energy_model.layer_reads.heads)
    with torch.no_grad():
        stats = method.monitor_scalars(real_images, method.features(real_images))
    assert -1 <= stats["energy_brightness_corr"] <= 1


def test_restore_and_energy_rebuild_the_heads_from_the_checkpoint(tmp_path, real_images):
    """`pretexts restore` and `pretexts energy` load the model through load_energy_model: its earlier heads too."""
    cfg = PretrainConfig(backbone="vit_tiny", img_size=32, task="random-mask", method_args={"read_layers": 3})
    torch.manual_seed(0)
    trained = create_energy_model("vit_tiny", img_size=32, read_layers=3).eval()
    save_checkpoint({"config": cfg.to_dict(), "model": trained.state_dict()}, tmp_path / "checkpoint.pt")
    loaded, _ = load_energy_model(tmp_path / "checkpoint.pt")
    assert len(loaded.layer_reads.heads) == 2
    with torch.no_grad():
        torch.testing.assert_close(loaded.energy(real_images), trained.energy(real_images))
