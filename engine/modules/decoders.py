"""The light pixel decoders of the reconstruction methods: the autoencoder baseline's token and pyramid
decoders, and the transformer blocks MAE's decoder shares with them."""

import torch.nn.functional as F
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from pretexts.backbones.vit_tokens import sincos_pos_embed
from pretexts.engine.modules.dense_heads import UperNet
from pretexts.engine.modules.features import Features
from pretexts.errors import ParameterError


def decoder_blocks(dim: int, depth: int, heads: int) -> nn.Sequential:
    """MAE's decoder blocks: `depth` timm transformer blocks of width `dim` (MLP ratio 4, qkv bias)."""
    return nn.Sequential(*[Block(dim, heads, mlp_ratio=4.0, qkv_bias=True) for _ in range(depth)])


class LightDecoder(nn.Module):
    """Tokens [B, L, in_dim] -> predictions [B, L, out_dim].

    Embed, (+ fixed sin-cos positions), blocks, norm, linear."""

    def __init__(self, in_dim: int, out_dim: int, grid: tuple[int, int] | None, dim: int, depth: int, heads: int):
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        pos = sincos_pos_embed(grid, dim).unsqueeze(0) if grid is not None else None
        self.register_buffer("pos", pos, persistent=False)
        self.blocks = decoder_blocks(dim, depth, heads)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, out_dim)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos.to(x.dtype)
        return self.out(self.norm(self.blocks(x)))


class PyramidDecoder(nn.Module):
    """A CNN's (or Swin's) 4 stages -> image: UperNet's PPM + FPN of width `dim` fused at the finest stage,
    which predicts each cell's stride x stride pixels (pixel shuffle).

    The last feature map alone is 1 x 1 at 32 px: a decoder reading only that stays 3-5x worse than its
    input; the pyramid gives it the spatial detail the stages before pooling hold.
    """

    def __init__(self, backbone: nn.Module, img_size: int, dim: int):
        super().__init__()
        self.features = Features(backbone, img_size)
        finest = self.features.widths[0]
        if img_size % finest:
            raise ParameterError(
                f"the finest feature map is {finest} px wide at {img_size} px; use an image size "
                f"that is a multiple of the backbone's total stride."
            )
        self.stride = img_size // finest
        self.head = UperNet(self.features.channels, 3 * self.stride**2, width=dim)

    def forward(self, images: Tensor) -> Tensor:
        return F.pixel_shuffle(self.head(self.features(images)), self.stride)
