"""MAE (He et al. 2022, facebookresearch/mae models_mae.py) over the project's timm ViT backbone.

The encoder reuses the backbone's patch_embed, cls token, pos_embed, blocks and norm and sees only the
visible patches; a light decoder (timm Blocks, fixed sin-cos positions) predicts the masked patches'
pixels; the loss is MSE on masked patches only, with per-patch normalised targets (`norm_pix_loss`).
"""

import math

import torch
from torch import Tensor, nn

from pretexts.backbones.normalisation import normalisation
from pretexts.backbones.patches import patchify
from pretexts.backbones.vit_tokens import fix_sincos_positions, sincos_pos_embed, vit_geometry, with_prefix
from pretexts.engine.modules.decoders import decoder_blocks
from pretexts.errors import ParameterError

MAX_HEADS = 64  # the most decoder heads `--method-arg decoder_heads` takes


def mae_decoder(embed_dim: int) -> dict | None:
    """MAE's own decoder, 8 blocks of width 512 with 16 heads (models_mae.py's dec512d8b, its default for ViT-B, -L
    and -H), for an encoder as wide as ViT-B (768) or wider; None below, which MAE never sized. The autoencoder
    baseline sizes its token decoder by the same rule."""
    if embed_dim < 768:
        return None
    return {"decoder_dim": 512, "decoder_depth": 8, "decoder_heads": 16}


def decoder_defaults(embed_dim: int) -> dict:
    """MAE's 8 x 512 (16 heads) for ViT-B and wider (`mae_decoder`); below ViT-B, 2 blocks of half the encoder's
    width (>= 64)."""
    dim = max(64, embed_dim // 2 // 32 * 32 or 64)
    return mae_decoder(embed_dim) or {"decoder_dim": dim, "decoder_depth": 2, "decoder_heads": max(2, dim // 32)}


def decoder_sizes(embed_dim: int, dim: int | None, depth: int | None, heads: int | None) -> tuple[int, int, int]:
    """The decoder's width, depth and heads: each given, else scaled to the encoder (`decoder_defaults`). Auto heads
    that do not divide a width given become the largest count that does, up to the width / 32; heads given that do
    not divide the width are refused in one line naming those that do."""
    d = decoder_defaults(embed_dim)
    width, depth, count = dim or d["decoder_dim"], depth or d["decoder_depth"], heads or d["decoder_heads"]
    if width % count and not heads:
        count = max(h for h in range(1, max(1, width // 32) + 1) if width % h == 0)
    if width % count:
        fits = ", ".join(str(h) for h in range(1, min(width, MAX_HEADS) + 1) if width % h == 0)
        auto_width = "" if dim else f" (auto for an encoder of width {embed_dim})"
        raise ParameterError(
            f"method mae: decoder_heads {count} does not divide the decoder width {width}{auto_width}; "
            f"give decoder_heads one of {fits}, "
            f"or a decoder_dim divisible by {math.lcm(count, 4)} (by the heads, and by 4 for the sin-cos positions)."
        )
    return width, depth, count


def random_masking(batch: int, length: int, mask_ratio: float, generator=None, device=None, noise=None):
    """MAE's per-sample masking by argsort of noise: (ids_keep [B,K], mask [B,L] 1=masked, ids_restore [B,L]);
    `noise` [B,L], drawn beforehand (a whole batch's, split into micro-batches), or drawn here from `generator`."""
    keep = int(length * (1 - mask_ratio))
    if noise is None:
        noise = torch.rand(batch, length, generator=generator, device=device)
    ids_shuffle = torch.argsort(noise, dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    mask = torch.ones(batch, length, device=device)
    mask[:, :keep] = 0
    return ids_shuffle[:, :keep], torch.gather(mask, 1, ids_restore), ids_restore


class MAEModel(nn.Module):
    """backbone (timm ViT, the weights to pretrain) + MAE decoder; `loss(images, generator)`."""

    def __init__(
        self,
        backbone: nn.Module,
        name: str,
        mask_ratio: float = 0.75,
        decoder_dim: int | None = None,
        decoder_depth: int | None = None,
        decoder_heads: int | None = None,
        norm_pix_loss: bool = True,
    ):
        super().__init__()
        geo = vit_geometry(backbone, name, "MAE")
        self.backbone, self.patch, self.grid, self.prefix = backbone, geo["patch"][0], geo["grid"], geo["prefix"]
        self.mask_ratio, self.norm_pix_loss = mask_ratio, norm_pix_loss
        dim, depth, heads = decoder_sizes(geo["dim"], decoder_dim, decoder_depth, decoder_heads)
        mean, std = normalisation(backbone)
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        self.decoder_embed = nn.Linear(geo["dim"], dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        nn.init.normal_(self.mask_token, std=0.02)
        self.register_buffer("decoder_pos", sincos_pos_embed(self.grid, dim).unsqueeze(0), persistent=False)
        self.decoder_blocks = decoder_blocks(dim, depth, heads)
        self.decoder_norm = nn.LayerNorm(dim)
        self.decoder_pred = nn.Linear(dim, self.patch * self.patch * 3)
        fix_sincos_positions(backbone, name, "MAE")  # MAE's encoder positions are the fixed table, not learnt

    def encode(self, images: Tensor, ids_keep: Tensor) -> Tensor:
        """Visible patch tokens only (plus prefix tokens) through the backbone's blocks and norm."""
        vit = self.backbone
        x = vit.patch_embed(self.normalised(images))
        if x.dim() == 4:  # NHWC patch embed
            x = x.flatten(1, 2)
        x = x + vit.pos_embed[:, vit.pos_embed.shape[1] - x.shape[1] :]  # the patch rows (prefix rows lead)
        x = torch.gather(x, 1, ids_keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        return vit.norm(vit.blocks(vit.norm_pre(with_prefix(vit, x))))

    def decode(self, latent: Tensor, ids_restore: Tensor) -> Tensor:
        """MAE's decoder: embed, append mask tokens, unshuffle, + sin-cos positions, blocks -> [B, L, p*p*3]. The
        prefix tokens go through the decoder too (position 0), as in MAE's, so the encoder's class-token output,
        the feature probes and fine-tuning read, is trained; only the patch rows are predicted."""
        x = self.decoder_embed(latent)
        p, (b, length) = self.prefix, ids_restore.shape
        patches = torch.cat([x[:, p:], self.mask_token.expand(b, length - (x.shape[1] - p), -1)], dim=1)
        patches = torch.gather(patches, 1, ids_restore.unsqueeze(-1).expand(-1, -1, patches.shape[-1]))
        x = torch.cat([x[:, :p], patches + self.decoder_pos.to(x.dtype)], dim=1)
        return self.decoder_pred(self.decoder_norm(self.decoder_blocks(x)))[:, p:]

    def normalised(self, images: Tensor) -> Tensor:
        return (images - self.mean) / self.std

    def target(self, images: Tensor) -> Tensor:
        """The normalised image's patches, as MAE regresses them (its loader normalises), per patch normalised
        again with `norm_pix_loss`."""
        target = patchify(self.normalised(images), self.patch)
        if self.norm_pix_loss:
            mean, var = target.mean(-1, keepdim=True), target.var(-1, keepdim=True)
            target = (target - mean) / (var + 1e-6) ** 0.5
        return target

    def masked_loss(self, pred: Tensor, images: Tensor, mask: Tensor) -> Tensor:
        per_patch = ((pred - self.target(images)) ** 2).mean(-1)
        return (per_patch * mask).sum() / mask.sum()

    def forward(self, images: Tensor, generator=None, noise=None):
        """images [B,3,H,W] in [0,1] -> (loss, pred [B,L,p*p*3], mask [B,L]); the mask from `noise` [B,L] where
        given (a whole batch's, split into micro-batches), else drawn from `generator`."""
        b = images.shape[0]
        length = self.grid[0] * self.grid[1]
        ids_keep, mask, ids_restore = random_masking(b, length, self.mask_ratio, generator, images.device, noise)
        pred = self.decode(self.encode(images, ids_keep), ids_restore)
        return self.masked_loss(pred, images, mask), pred, mask
