"""MAE's published behaviour (He et al. 2022, models_mae.py), checked offline on the embedded images."""

import pytest
import torch

from pretexts.backbones import create_backbone
from pretexts.backbones.patches import patchify, unpatchify
from pretexts.engine.methods.mae_model import MAEModel, random_masking
from pretexts.errors import ParameterError


def make(seed=0, **kw):
    torch.manual_seed(seed)
    return MAEModel(create_backbone("vit_tiny"), "vit_tiny", **kw)


def test_mask_ratio_exact_and_restore_inverts_shuffle():
    ids_keep, mask, ids_restore = random_masking(4, 64, 0.75, torch.Generator().manual_seed(0))
    assert ids_keep.shape == (4, int(64 * 0.25)) and (mask.sum(1) == 64 - 16).all()
    tokens = torch.arange(64).expand(4, -1)
    shuffled = torch.gather(tokens, 1, torch.argsort(ids_restore, 1))
    assert torch.equal(torch.gather(shuffled, 1, ids_restore), tokens)
    assert (torch.gather(mask, 1, ids_keep) == 0).all()


def test_patchify_round_trip(real_images):
    assert torch.equal(unpatchify(patchify(real_images, 4), 4, (8, 8)), real_images)


def test_loss_counts_masked_patches_only_and_norm_pix(real_images):
    model = make()
    images = real_images[:4]
    target = model.target(images)
    textured = patchify(images, 4).var(-1) > 1e-3  # flat patches stay below 1: MAE's eps 1e-6 in the variance
    assert target.mean(-1).abs().max() < 1e-5 and (target.var(-1)[textured] - 1).abs().max() < 1e-2
    mask = (torch.rand(4, 64) < 0.75).float()
    pred = torch.randn(4, 64, 48)
    changed = pred.clone()
    changed[mask == 0] += 5.0
    assert torch.allclose(model.masked_loss(pred, images, mask), model.masked_loss(changed, images, mask))


def test_seeded_gradients_reach_encoder_and_loss_falls(real_images):
    a, b = make(), make()
    la = a(real_images, torch.Generator().manual_seed(1))[0]
    assert torch.equal(la, b(real_images, torch.Generator().manual_seed(1))[0])
    la.backward()
    assert a.backbone.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    opt = torch.optim.AdamW(a.parameters(), lr=1e-3)
    losses = []
    for step in range(15):
        loss = a(real_images, torch.Generator().manual_seed(step % 3))[0]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-3:]) < sum(losses[:3])


def test_non_vit_backbone_is_rejected():
    with pytest.raises(ParameterError, match="ViT"):
        MAEModel(create_backbone("convnext_atto", img_size=32), "convnext_atto")


@pytest.mark.parametrize("ratio,hidden", [(0.5, 32), (0.9, 58)])  # MAE keeps int(64 * (1 - ratio)) patches
def test_the_models_mask_hides_its_mask_ratio_of_the_patches(real_images, ratio, hidden):
    """`mask_ratio` (`--method-arg mask_ratio`) is the share of the 64 patches each image hides, not MAE's 0.75."""
    loss, pred, mask = make(mask_ratio=ratio)(real_images[:4], torch.Generator().manual_seed(0))
    assert mask.shape == (4, 64) and (mask.sum(1) == hidden).all()
    assert pred.shape == (4, 64, 48) and torch.isfinite(loss)


def test_the_decoder_puts_each_token_back_at_its_patch_and_mask_tokens_at_the_hidden_ones():
    """With the decoder's layers made identities, decoded token i is what the encoder said about patch i: the visible
    tokens (sent in shuffled order) land at their own patches, the mask token at every hidden patch."""
    model = make(decoder_dim=192)  # the encoder's width: an identity embedding fits
    for name in ("decoder_embed", "decoder_blocks", "decoder_norm", "decoder_pred"):
        setattr(model, name, torch.nn.Identity())
    model.decoder_pos = torch.zeros_like(model.decoder_pos)
    with torch.no_grad():
        model.mask_token.fill_(-1.0)
    ids_keep, mask, ids_restore = random_masking(2, 64, 0.75, torch.Generator().manual_seed(0))
    latent = torch.zeros(2, model.prefix + ids_keep.shape[1], 192)
    latent[:, model.prefix :] = ids_keep.unsqueeze(-1).float()  # each visible token carries its patch's index
    decoded = model.decode(latent, ids_restore)[..., 0]
    patches = torch.arange(64).float().expand(2, -1)
    assert torch.equal(decoded, torch.where(mask.bool(), -1.0, patches))


def test_the_class_token_output_is_trained_through_the_decoder(real_images):
    """The decoder dropped the prefix tokens, so the encoder's class-token output, the feature probes and
    fine-tuning read, had no gradient (MAE's decoder takes it, at position 0)."""
    model, images = make(), real_images[:4]
    ids_keep, mask, ids_restore = random_masking(4, 64, 0.75, torch.Generator().manual_seed(0))
    latent = model.encode(images, ids_keep)
    latent.retain_grad()
    model.masked_loss(model.decode(latent, ids_restore), images, mask).backward()
    assert latent.grad[:, 0].abs().min() > 0 and latent.grad[:, model.prefix :].abs().sum() > 0


@pytest.mark.parametrize("norm_pix_loss", [True, False])
def test_the_target_is_the_normalised_image_and_the_figure_reads_it_back_to_pixels(real_images, norm_pix_loss):
    """MAE regresses its loader's normalised images; the targets were [0, 1] pixels, which differ wherever the
    backbone's channels are normalised unequally (ImageNet's mean and std, as DeiT's)."""
    from pretexts.engine.methods.mae import mae_columns

    model, images = make(norm_pix_loss=norm_pix_loss), real_images[:4]
    model.mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    model.std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    expected = patchify((images - model.mean) / model.std, 4)
    if not norm_pix_loss:
        torch.testing.assert_close(model.target(images), expected)
    else:
        centred = (expected - expected.mean(-1, keepdim=True)) / (expected.var(-1, keepdim=True) + 1e-6) ** 0.5
        torch.testing.assert_close(model.target(images), centred)
    mask = (torch.rand(4, 64, generator=torch.Generator().manual_seed(0)) < 0.75).float()
    model.forward = lambda images, generator: (None, model.target(images), mask)  # a perfect prediction
    columns = mae_columns(model, images)
    torch.testing.assert_close(columns["reconstruction"], images, atol=1e-4, rtol=0)


def test_the_decoder_computes_maes_forward_decoder():
    """facebookresearch/mae's forward_decoder, written as it is there, on the same weights: the class token leads,
    the mask tokens are unshuffled with the visible tokens, the class row's position is 0, and its output is dropped."""
    model = make().eval()
    ids_keep, _, ids_restore = random_masking(2, 64, 0.75, torch.Generator().manual_seed(0))
    latent = model.encode(torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)), ids_keep)

    def forward_decoder(x, ids_restore):
        x = model.decoder_embed(x)
        mask_tokens = model.mask_token.repeat(x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        x = torch.cat([x[:, :1, :], x_], dim=1)
        x = x + torch.cat([torch.zeros(1, 1, x.shape[-1]), model.decoder_pos], 1)
        return model.decoder_pred(model.decoder_norm(model.decoder_blocks(x)))[:, 1:, :]

    with torch.no_grad():
        torch.testing.assert_close(model.decode(latent, ids_restore), forward_decoder(latent, ids_restore))
