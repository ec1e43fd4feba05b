"""Fixed 2D sin-cos patch positions for the energy's ViT (`--method-arg positions=sincos`, and auto's choice on a
ViT), as MAE's encoder has them: the table is set and frozen in pretraining, the restoration still trains the
blocks, fine-tuning starts from the table and trains it; auto leaves a CNN as it is, and sincos on a backbone
without a ViT's positions is refused."""

import pytest
import torch
from tiny_trainers import small_energy_method

from pretexts.backbones.vit_tokens import sincos_pos_embed
from pretexts.engine import create_energy_model
from pretexts.engine.evaluation.from_checkpoint import load_energy_model
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.engine.training.config import PretrainConfig
from pretexts.errors import ParameterError


def model(positions: str = "learned"):
    torch.manual_seed(0)
    return create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2, positions=positions)


def energy_method(task: str = "random-mask", **method_args):
    return small_energy_method(lambda args: model(args["positions"]), task, **method_args)


def test_the_patch_positions_are_the_fixed_table_and_the_blocks_still_train(real_images):
    assert energy_method().args["positions"] == "auto"
    method = energy_method(positions="sincos")
    energy_model = method.setup()
    positions = energy_model.backbone.pos_embed
    torch.testing.assert_close(positions[0, 1:], sincos_pos_embed((4, 4), 192))  # 16 patches of 8 px at 32 px
    assert not positions[0, 0].any() and not positions.requires_grad  # the class token's row: zero, as MAE's
    method.loss(method.task(real_images, torch.Generator().manual_seed(0))).backward()
    assert positions.grad is None and energy_model.backbone.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    learned = model("learned").backbone.pos_embed
    assert learned.requires_grad and learned.std() < 0.1  # timm's: a random draw of std 0.02


def test_auto_is_the_table_on_a_vit_and_leaves_other_backbones_as_they_are():
    vit = create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2, positions="auto")
    assert vit.positions == "sincos" and not vit.backbone.pos_embed.requires_grad
    torch.testing.assert_close(vit.backbone.pos_embed[0, 1:], sincos_pos_embed((4, 4), 192))
    assert create_energy_model("test_convnext", img_size=32, positions="auto").positions == "learned"
    assert create_energy_model("vit_tiny", img_size=32, depth=1, positions="learned").backbone.pos_embed.requires_grad


def test_a_backbone_without_vit_positions_is_refused():
    with pytest.raises(ParameterError, match="ViT backbone with absolute position embeddings"):
        create_energy_model("test_convnext", img_size=32, positions="sincos")
    with pytest.raises(ParameterError, match="positions"):
        energy_method(positions="rope")
    with pytest.raises(ParameterError, match="positions must be auto, learned or sincos; got 'rope'"):
        create_energy_model("vit_tiny", img_size=32, depth=1, positions="rope")


def test_fine_tuning_starts_from_the_table_and_trains_it(tmp_path, real_images):
    cfg = PretrainConfig(backbone="vit_tiny", img_size=32, task="random-mask", method_args={"positions": "sincos"})
    trained = create_energy_model("vit_tiny", img_size=32, positions="sincos").eval()
    save_checkpoint({"config": cfg.to_dict(), "model": trained.state_dict()}, tmp_path / "checkpoint.pt")
    classifier, _ = create_classifier(str(tmp_path / "checkpoint.pt"), num_classes=10)
    torch.testing.assert_close(classifier.pos_embed[0, 1:], sincos_pos_embed((8, 8), 192))
    assert classifier.pos_embed.requires_grad
    loaded, _ = load_energy_model(tmp_path / "checkpoint.pt")  # restore and energy rebuild it
    with torch.no_grad():
        torch.testing.assert_close(loaded.energy(real_images), trained.energy(real_images))
