"""What every model shares from pretexts.backbones: the input normalisation (one source, one fallback), the patch
layout of pixel predictions, and the prefix tokens of a ViT."""

import pytest
import torch

import pretexts
from pretexts.backbones import create_backbone
from pretexts.backbones.normalisation import IMAGENET_MEAN, IMAGENET_STD, normalisation
from pretexts.backbones.patches import patchify, unpatchify
from pretexts.backbones.vit_tokens import patch_tokens, with_prefix
from pretexts.engine.evaluation.export import data_config
from pretexts.engine.methods.autoencoder import AutoencoderModel
from pretexts.engine.methods.energy.model import EnergyModel
from pretexts.engine.methods.mae_model import MAEModel


def models_of(backbone):
    return [
        EnergyModel(backbone),
        AutoencoderModel(backbone, pretexts.create_pretext("colorization"), 32, "vit_tiny"),
        MAEModel(backbone, "vit_tiny"),
    ]


@pytest.mark.parametrize("own", [True, False], ids=["timm's statistics", "none"])
def test_every_model_and_the_export_normalise_alike(own):
    """ViT-Tiny's timm config says mean = std = 0.5; a backbone without a config gets ImageNet's, everywhere
    (MAE's model used to fall back to 0.5 where the others took ImageNet's)."""
    backbone = create_backbone("vit_tiny", img_size=32)
    if not own:
        backbone.pretrained_cfg = {}
    mean, std = ((0.5,) * 3, (0.5,) * 3) if own else (IMAGENET_MEAN, IMAGENET_STD)
    assert normalisation(backbone) == (mean, std)
    for model in models_of(backbone):
        assert model.mean.flatten().tolist() == pytest.approx(mean), type(model).__name__
        assert model.std.flatten().tolist() == pytest.approx(std), type(model).__name__
    assert (data_config(backbone, 32)["mean"], data_config(backbone, 32)["std"]) == (mean, std)


def test_patches_round_trip_in_maes_layout(real_images):
    patches = patchify(real_images[:2], (4, 8))
    assert patches.shape == (2, 8 * 4, 4 * 8 * 3)
    assert torch.equal(patches[0, 0], real_images[0, :, :4, :8].permute(1, 2, 0).flatten())  # (p, q, c)
    assert torch.equal(unpatchify(patches, (4, 8), (8, 4)), real_images[:2])


def test_the_autoencoder_decodes_patches_in_the_layout_mae_predicts(real_images):
    """A ViT decoder output that is patchify(x) reconstructs x: the AE and MAE share one patch layout."""
    images = real_images[:2]
    model = AutoencoderModel(
        create_backbone("vit_tiny", img_size=32), pretexts.create_pretext("colorization"), 32, "vit_tiny"
    )
    model.decoder.forward = lambda tokens: patchify(images, 4)
    assert torch.equal(model(images), images)


def test_prefix_tokens_lead_and_are_dropped_again():
    vit = create_backbone("vit_tiny", img_size=32, reg_tokens=2)
    patches = torch.randn(3, 64, vit.embed_dim)
    tokens = with_prefix(vit, patches, positioned=False)
    assert tokens.shape == (3, 64 + 3, vit.embed_dim) and torch.equal(patch_tokens(vit, tokens), patches)
    assert torch.equal(tokens[0, 0], vit.cls_token[0, 0]) and torch.equal(tokens[0, 1:3], vit.reg_token[0])
    positioned = with_prefix(vit, patches)
    assert torch.equal(positioned[:, :3], tokens[:, :3] + vit.pos_embed[:, :3]) and torch.equal(
        positioned[:, 3:], patches
    )


@pytest.mark.parametrize("size", ["32", 0, True, 32.0])
def test_an_image_size_that_is_no_whole_number_of_pixels_is_refused(size):
    from pretexts.errors import ParameterError

    with pytest.raises(ParameterError, match="img_size must be a whole number of pixels or None"):
        create_backbone("test_convnext", img_size=size)
