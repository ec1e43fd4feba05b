"""Transformer blocks between a ViT's tokens and the energy's head (`--method-arg head_blocks=K`): the energy reads
through them, the restoration trains them and the backbone, fine-tuning and `restore` find what they need in the
checkpoint, and the refusals."""

import pytest
import torch
from tiny_trainers import small_energy_method
from torch import nn

from pretexts.engine import create_energy_model
from pretexts.engine.evaluation.from_checkpoint import load_energy_model
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.engine.methods.energy.method import EnergyMethod
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.engine.training.config import PretrainConfig
from pretexts.errors import ParameterError


def model(head_blocks: int) -> nn.Module:
    torch.manual_seed(0)
    return create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2, head_blocks=head_blocks)


def test_the_energy_reads_the_tokens_through_the_head_blocks(real_images):
    energy_model = model(head_blocks=2).eval()
    assert len(energy_model.head_blocks.blocks) == 2 and model(head_blocks=0).head_blocks is None
    first = energy_model.head_blocks.blocks[0]
    assert first.attn.num_heads == 3 and first.mlp.fc1.out_features == 768  # shaped as the backbone's own
    with torch.no_grad():
        energies = energy_model.energy(real_images)
        assert energies.shape == (16,) and torch.isfinite(energies).all()
        paper = energy_model.score(energy_model.backbone(energy_model.normalize(real_images)))
        assert not torch.allclose(energies, paper)  # the head reads the blocks' output, not the backbone's
        for block in energy_model.head_blocks.blocks:  # with both blocks' residual branches silenced ...
            for linear in (block.attn.proj, block.mlp.fc2):
                nn.init.zeros_(linear.weight)
                nn.init.zeros_(linear.bias)
        tokens = energy_model.backbone.forward_features(energy_model.normalize(real_images))
        pooled = energy_model.backbone.forward_head(energy_model.head_blocks.norm(tokens), pre_logits=True)
        torch.testing.assert_close(energy_model.energy(real_images), energy_model.score(pooled))  # ... the norm only


def energy_method(task: str = "random-mask", **method_args) -> EnergyMethod:
    """The energy method on `model`'s small ViT, with `head_blocks` from its arguments."""
    return small_energy_method(lambda args: model(args["head_blocks"]), task, **method_args)


def test_a_training_step_trains_the_backbone_and_the_head_blocks(real_images):
    method = energy_method(head_blocks=1)
    energy_model = method.setup(planned_steps=1)
    method.loss(method.task(real_images, torch.Generator().manual_seed(0))).backward()
    assert energy_model.backbone.blocks[0].attn.qkv.weight.grad.abs().sum() > 0  # through the head blocks
    assert energy_model.head_blocks.blocks[0].mlp.fc1.weight.grad.abs().sum() > 0
    with torch.no_grad():
        stats = method.monitor_scalars(real_images, method.features(real_images))
    assert -1 <= stats["energy_brightness_corr"] <= 1


def test_the_option_is_parsed_in_its_range_and_refused_where_it_cannot_work():
    assert energy_method().args["head_blocks"] == 0 and energy_method(head_blocks="2").args["head_blocks"] == 2
    with pytest.raises(ParameterError, match="head_blocks"):
        energy_method(head_blocks=33)
    with pytest.raises(ParameterError, match="use head_blocks=0"):
        energy_method(task="patch-sorting", head_blocks=1).setup(planned_steps=1)
    with pytest.raises(ParameterError, match="Use head_blocks=0, or a ViT"):
        create_energy_model("test_convnext", img_size=32, head_blocks=1)
    with pytest.raises(ParameterError, match="give one of them"):
        create_energy_model("vit_tiny", img_size=32, depth=2, read_layers=2, head_blocks=1)


def test_fine_tuning_takes_the_backbone_and_restore_the_whole_energy(tmp_path, real_images):
    cfg = PretrainConfig(backbone="vit_tiny", img_size=32, task="random-mask", method_args={"head_blocks": 2})
    torch.manual_seed(0)
    trained = create_energy_model("vit_tiny", img_size=32, head_blocks=2).eval()
    save_checkpoint({"config": cfg.to_dict(), "model": trained.state_dict()}, tmp_path / "checkpoint.pt")
    classifier, _ = create_classifier(str(tmp_path / "checkpoint.pt"), num_classes=0)  # no head-block weights
    loaded, _ = load_energy_model(tmp_path / "checkpoint.pt")
    images = trained.normalize(real_images)
    with torch.no_grad():
        torch.testing.assert_close(classifier.eval()(images), trained.backbone(images))
        torch.testing.assert_close(loaded.energy(real_images), trained.energy(real_images))
