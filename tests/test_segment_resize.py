"""A ViT checkpoint used at another size (MAE's ADE20K recipe: pretrained at 224 px, segmented at 512 px): its position
table is resampled as timm does; and the plain-ViT pyramid taps BEiT/MAE's UperNet blocks."""

import pytest
import torch
from cli_runs import one_torch_thread, run_cli  # noqa: F401 (autouse)
from pretrained_checkpoints import write_checkpoint
from timm.layers import resample_abs_pos_embed

from pretexts.backbones.vit_tokens import sincos_pos_embed
from pretexts.engine.evaluation.pretrained import classifier_from, create_classifier
from pretexts.engine.modules.features import Features, pyramid_blocks
from pretexts.engine.training.checkpoint import load_checkpoint
from pretexts.errors import ParameterError


@pytest.mark.parametrize("depth, taps", [(12, [3, 5, 7, 11]), (24, [7, 11, 15, 23])])
def test_the_pyramid_taps_beit_and_mae_upernet_blocks(depth, taps):
    assert pyramid_blocks(depth) == taps


@pytest.mark.parametrize("depth", range(4, 33))
def test_every_depth_of_4_or_more_gives_4_increasing_blocks(depth):
    taps = pyramid_blocks(depth)
    assert len(taps) == 4 and 0 <= taps[0] and taps[-1] == depth - 1
    assert all(a < b for a, b in zip(taps, taps[1:])), taps


def test_the_test_backbones_get_valid_taps_and_too_shallow_a_vit_is_refused():
    from pretexts import backbones

    assert Features(backbones.create_backbone("vit_tiny", img_size=32), 32).indices == [3, 5, 7, 11]
    assert Features(backbones.create_backbone("test_vit", img_size=32), 32).indices == [1, 2, 3, 5]  # 6 blocks
    with pytest.raises(ParameterError, match="4 or more"):
        pyramid_blocks(3)


@pytest.mark.parametrize("backbone", ["vit_tiny", "test_vit"])
def test_a_32_px_checkpoint_loads_at_64_px_with_timms_resampled_positions(tmp_path, backbone):
    path, _ = write_checkpoint(tmp_path / "checkpoint.pt", backbone=backbone)
    saved = load_checkpoint(path)["model"]["backbone.pos_embed"]
    model, _ = create_classifier(str(path), img_size=64, resize=True, num_classes=0)
    assert model.patch_embed.img_size == (64, 64)
    assert torch.equal(model.pos_embed.data, resample_abs_pos_embed(saved, new_size=list(model.patch_embed.grid_size)))
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, model.num_features)


def test_without_resize_another_size_is_still_refused(tmp_path):
    path, _ = write_checkpoint(tmp_path / "checkpoint.pt", backbone="vit_tiny")
    with pytest.raises(ParameterError, match="pretrained at 32 px"):
        classifier_from(load_checkpoint(path), path, img_size=64, num_classes=0)


def test_patch_sortings_fixed_table_is_rebuilt_on_the_new_grid(tmp_path):
    path, _ = write_checkpoint(tmp_path / "checkpoint.pt", backbone="vit_tiny", task="patch-sorting")
    model, _ = create_classifier(str(path), img_size=64, resize=True, num_classes=0)
    assert torch.allclose(model.pos_embed.data[:, 1:], sincos_pos_embed((16, 16), model.embed_dim))


def test_segment_runs_from_a_32_px_vit_checkpoint_at_64_px(tmp_path):
    path, _ = write_checkpoint(tmp_path / "checkpoint.pt", backbone="vit_tiny")
    args = ["segment", "--checkpoint", path, "--data", "generated", "--img-size", 64, "--max-steps", 1]
    result, error = run_cli([*args, "--batch-size", 2, "--out", tmp_path / "seg"])
    assert result.exit_code == 0 and not error, result.output
    assert "position embeddings resampled from 32 to 64 px (8x8 to 16x16 patches" in result.output
    assert (tmp_path / "seg" / "results.json").exists()


def test_finetune_runs_from_a_32_px_vit_checkpoint_at_64_px_and_says_so(tmp_path):
    """MAE fine-tunes at another size than it pretrained at (384 px after 224): the same resampling as segment's."""
    path, _ = write_checkpoint(tmp_path / "checkpoint.pt", backbone="vit_tiny")
    args = ["finetune", "--checkpoint", path, "--data", "sample", "--img-size", 64, "--epochs", 1]
    result, error = run_cli([*args, "--max-steps-per-epoch", 1, "--batch-size", 4, "--out", tmp_path / "ft"])
    assert result.exit_code == 0 and not error, result.output
    assert "position embeddings resampled from 32 to 64 px (8x8 to 16x16 patches" in result.output
    assert load_checkpoint(tmp_path / "ft" / "checkpoint.pt")["config"]["img_size"] == 64
