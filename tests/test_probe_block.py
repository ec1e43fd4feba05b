"""`pretexts probe --block K`: the features are the output of block K (a ViT's blocks, a CNN's stages), averaged
over positions and layer-normalised, and a block the backbone lacks is refused with the range to give."""

import json

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from pretrained_checkpoints import single_thread  # noqa: F401 (a fixture)
from torch import nn

from pretexts.backbones.factory import create_backbone
from pretexts.cli import main
from pretexts.engine.modules.features import BlockFeatures, Features
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


def test_block_k_is_the_output_after_k_blocks_pooled_over_the_patches(real_images):
    torch.manual_seed(0)
    vit = create_backbone("vit_tiny", img_size=32, patch_size=8, depth=4).eval()
    outputs = []
    hooks = [block.register_forward_hook(lambda module, args, out: outputs.append(out)) for block in vit.blocks]
    with torch.no_grad():
        vit(real_images[:4])
        for hook in hooks:
            hook.remove()
        for k, tokens in enumerate(outputs, 1):
            patches = tokens[:, vit.num_prefix_tokens :]  # the class token is not a position
            expected = F.layer_norm(patches.mean(1), (vit.embed_dim,))
            got = BlockFeatures(vit, k, "vit_tiny")(real_images[:4])
            assert got.shape == (4, 192)
            torch.testing.assert_close(got, expected)
    assert not torch.allclose(expected, F.layer_norm(vit(real_images[:4]), (192,)))  # not the class token's


def test_a_cnn_is_read_by_its_stages_and_a_block_it_lacks_is_refused(real_images):
    convnext = create_backbone("test_convnext").eval()
    with torch.no_grad():
        assert BlockFeatures(convnext, 2, "test_convnext")(real_images[:2]).shape == (2, 32)  # its stages: 24 32 48 64
    with pytest.raises(ParameterError, match="it has 4; give 1 to 4"):
        BlockFeatures(convnext, 5, "test_convnext")
    with pytest.raises(ParameterError, match=r"probe its pooled features \(no block\)"):
        BlockFeatures(nn.Sequential(nn.Flatten()), 1, "a plain module")


def probe(tmp_path, *args):
    return CliRunner().invoke(
        main,
        ["probe", "--from-scratch", "--backbone", "test_convnext", "--probe", "knn", "--knn-k", "5", "--workers", "0"]
        + ["--quiet", "--out", str(tmp_path), *args],
    )


def test_the_cli_probes_a_block_and_records_which(tmp_path):
    result = probe(tmp_path / "b3", "--block", "3")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("probing test_convnext at random init (seed 0), block 3 of 4, on 'sample'")
    found = json.loads((tmp_path / "b3" / "results.json").read_text())
    assert found["block"] == 3 and found["feature_dim"] == 48 and 0 <= found["knn"]["k=5"] <= 100
    assert probe(tmp_path / "p").exit_code == 0
    pooled = json.loads((tmp_path / "p" / "results.json").read_text())
    assert pooled["block"] is None and pooled["feature_dim"] == 64
    beyond = probe(tmp_path / "b9", "--block", "9")
    assert beyond.exit_code != 0
    assert "block 9 is beyond backbone 'test_convnext': it has 4; give 1 to 4" in beyond.output
    assert "--block (block) must be in [1, 1000], got 0" in probe(tmp_path / "b0", "--block", "0").output


def test_feature_maps_of_a_backbone_without_forward_intermediates_are_refused_in_one_line():
    """segment (and the AE's decoder) on a plugin's plain nn.Module: a ParameterError naming what it lacks, not an
    AttributeError from inside the first forward."""
    with pytest.raises(ParameterError, match=r"forward_intermediates, which this backbone \(Sequential\) does not"):
        Features(nn.Sequential(nn.Conv2d(3, 8, 3), nn.GELU()), 32)
