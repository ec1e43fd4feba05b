"""The autoencoder baseline's model: the same backbone as encoder, an MAE-style light decoder (paper, Table 2 gray rows)."""
import torch
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from backbones.vit_tokens import sincos_pos_embed, vit_geometry
from pretexts.base import Pretext
from pretexts.errors import ParameterError
from pretexts.patch_sorting import PatchSorting

# MAE's decoder is 8 blocks of width 512 for ViT-L; its ablation shows one narrow block still fine-tunes
# as well. A few narrow blocks keep the baseline light at CPU scale.
DECODER_DIM, DECODER_DEPTH, DECODER_HEADS = 128, 2, 4


class LightDecoder(nn.Module):
    """Tokens [B, L, in_dim] -> predictions [B, L, out_dim]: embed, (+ fixed sin-cos positions), blocks, norm, linear."""

    def __init__(self, in_dim: int, out_dim: int, grid: tuple[int, int] | None, dim: int = DECODER_DIM,
                 depth: int = DECODER_DEPTH, heads: int = DECODER_HEADS):
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        pos = sincos_pos_embed(grid, dim).unsqueeze(0) if grid is not None else None
        self.register_buffer("pos", pos, persistent=False)
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_ratio=4.0, qkv_bias=True) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, out_dim)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos.to(x.dtype)
        return self.out(self.norm(self.blocks(x)))


class AutoencoderModel(nn.Module):
    """Encoder = the backbone to pretrain; decoder = `LightDecoder`.

    Pixel tasks: the encoder reads the corrupted image; a ViT gives one token per patch, a CNN one per
    location of its last feature map (a cell of stride x stride pixels); the decoder predicts each
    token's pixels and the image is reassembled (MAE's per-patch pixel head).
    Patch sorting (Section 4.1): the encoder ViT has no position embedding, sees the task's
    edge-masked image and, in training, only the kept tokens; the decoder, also without positions,
    predicts each patch's sin-cos position embedding, scored by MSE like the energy method's sorting.
    """

    def __init__(self, backbone: nn.Module, task: Pretext, img_size: int, name: str):
        super().__init__()
        self.backbone, self.backbone_name = backbone, name
        cfg = getattr(backbone, "pretrained_cfg", None) or {}
        self.register_buffer("mean", torch.tensor(cfg.get("mean", (0.485, 0.456, 0.406))).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(cfg.get("std", (0.229, 0.224, 0.225))).view(1, -1, 1, 1), persistent=False)
        self.sorting = isinstance(task, PatchSorting)
        if type(task).energy is not Pretext.energy and not self.sorting:
            raise ParameterError(f"the autoencoder baseline reconstructs pixels, or positions for patch sorting; "
                                 f"task '{task.name}' restores something else.")
        self.vit = hasattr(backbone, "num_prefix_tokens") and hasattr(backbone, "patch_embed")
        dim = backbone.num_features
        if self.sorting:
            vit_geometry(backbone, name, "the autoencoder baseline of patch sorting")
            self.grid, self.patch = None, None
            self.decoder = LightDecoder(dim, backbone.embed_dim, grid=None)
            return
        self.grid = tuple(backbone.patch_embed.grid_size) if self.vit else self._feature_grid(img_size)
        if img_size % self.grid[0] or img_size % self.grid[1]:
            raise ParameterError(f"backbone '{name}' maps {img_size} px to a {self.grid} grid; use an image size "
                                 f"that is a multiple of its stride.")
        self.patch = (img_size // self.grid[0], img_size // self.grid[1])
        self.decoder = LightDecoder(dim, 3 * self.patch[0] * self.patch[1], grid=self.grid)

    @torch.no_grad()
    def _feature_grid(self, img_size: int) -> tuple[int, int]:
        was_training = self.backbone.training
        features = self.backbone.eval().forward_features(torch.zeros(1, 3, img_size, img_size))
        self.backbone.train(was_training)
        return tuple(features.shape[1:3] if self.channels_last else features.shape[2:4])

    @property
    def channels_last(self) -> bool:
        return getattr(self.backbone, "output_fmt", "NCHW") == "NHWC"  # Swin

    def normalize(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std

    def encode(self, images: Tensor) -> Tensor:
        """Tokens [B, L, D] of the corrupted images: ViT patch tokens, or a CNN's last feature map."""
        x = self.backbone.forward_features(self.normalize(images))
        if self.vit:
            return x[:, self.backbone.num_prefix_tokens:]
        return x.flatten(1, 2) if self.channels_last else x.flatten(2).transpose(1, 2)

    def encode_unpositioned(self, images: Tensor, keep: Tensor | None) -> Tensor:
        """ViT patch tokens without any position embedding (the sorting baseline's encoder), kept tokens only."""
        vit = self.backbone
        x = vit.patch_embed(self.normalize(images))
        x = x.flatten(1, 2) if x.ndim == 4 else x
        if keep is not None:
            x = x.gather(1, keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        prefix = [t.expand(x.shape[0], -1, -1) for t in (vit.cls_token, getattr(vit, "reg_token", None)) if t is not None]
        x = vit.norm_pre(vit.pos_drop(torch.cat(prefix + [x], dim=1)))
        return vit.norm(vit.blocks(x))[:, vit.num_prefix_tokens:]

    def unpatchify(self, patches: Tensor) -> Tensor:
        """[B, L, 3 * ph * pw] -> images [B, 3, H, W]."""
        (rows, cols), (ph, pw) = self.grid, self.patch
        x = patches.view(patches.shape[0], rows, cols, 3, ph, pw).permute(0, 3, 1, 4, 2, 5)
        return x.reshape(patches.shape[0], 3, rows * ph, cols * pw)

    def forward(self, images: Tensor, keep: Tensor | None = None) -> Tensor:
        """Pixel tasks: the reconstructed images. Patch sorting: each (kept) patch's predicted position embedding."""
        if self.sorting:
            return self.decoder(self.encode_unpositioned(images, keep))
        return self.unpatchify(self.decoder(self.encode(images)))

    def reconstruct(self, sample) -> tuple[Tensor, Tensor]:
        """(prediction, target) of a corrupted sample; in eval mode both cover every patch."""
        if not self.sorting:
            return self(sample.state), sample.target
        keep = sample.info.get("keep") if self.training else None
        target = sample.target
        if keep is not None:
            target = target.gather(1, keep.unsqueeze(-1).expand(-1, -1, target.shape[-1]))
        return self(sample.context, keep), target
