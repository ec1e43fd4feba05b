"""What is read from inside a timm backbone: 4 feature maps (what UperNet reads, for segmentation and the AE's
pyramid decoder), and one block's output pooled to a vector (`pretexts probe --block`)."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pretexts.errors import ParameterError


def is_plain_vit(backbone: nn.Module) -> bool:
    """A ViT with one token grid (no stages of its own); Swin has `layers`, CNNs no patch embedding."""
    return hasattr(backbone, "blocks") and hasattr(backbone, "patch_embed") and not hasattr(backbone, "layers")


def pyramid_blocks(depth: int) -> list[int]:
    """The 4 blocks (0-based) of a plain ViT of `depth` blocks that feed the pyramid: BEiT's and MAE's ADE20K
    UperNet configs (mmsegmentation) tap 3/5/7/11 of 12 blocks and 7/11/15/23 of 24, i.e. d/3, d/2, 2d/3 and d."""
    if depth < 4:
        raise ParameterError(
            f"the feature pyramid reads 4 blocks of a plain ViT, and this one has {depth}; use a ViT of 4 or more "
            f"blocks (vit_tiny has 12)."
        )
    taps = [depth // 3 - 1, depth // 2 - 1, 2 * depth // 3 - 1, depth - 1]
    for i in range(1, 4):  # under 6 blocks the rounding can put two taps on one block: move the later one on
        taps[i] = max(taps[i], taps[i - 1] + 1)
    return taps


class Features(nn.Module):
    """4 feature maps from any timm model via `forward_intermediates`.

    Plain ViTs: 4 blocks (`pyramid_blocks`) reshaped to a grid, then MAE/BEiT's pyramid (deconv x4, deconv x2,
    identity, maxpool) to strides 4..32 of the patch grid. CNNs/Swin: their last 4 stages as they are.
    """

    def __init__(self, backbone: nn.Module, img_size: int):
        super().__init__()
        if not hasattr(backbone, "forward_intermediates"):
            raise ParameterError(
                f"feature maps are read through timm's forward_intermediates, which this backbone "
                f"({type(backbone).__name__}) does not have; segmentation and the AE's decoder need a backbone that "
                f"has it (timm's ViTs, Swins, ConvNeXts and ResNets do)."
            )
        self.backbone = backbone
        self.plain_vit = is_plain_vit(backbone)
        if self.plain_vit:
            self.indices = pyramid_blocks(len(backbone.blocks))
            d = backbone.embed_dim
            self.pyramid = nn.ModuleList(
                [
                    nn.Sequential(
                        nn.ConvTranspose2d(d, d, 2, 2), nn.BatchNorm2d(d), nn.GELU(), nn.ConvTranspose2d(d, d, 2, 2)
                    ),
                    nn.ConvTranspose2d(d, d, 2, 2),
                    nn.Identity(),
                    nn.MaxPool2d(2),
                ]
            )
        else:
            self.indices = 4
        with torch.no_grad():
            was = backbone.training
            self.eval()  # a 1-image probe for channel counts and sizes; BatchNorm needs eval mode for it
            probe = self.forward(torch.zeros(1, 3, img_size, img_size))
            self.channels, self.widths = [f.shape[1] for f in probe], [f.shape[-1] for f in probe]
            self.train(was)

    def forward(self, x):
        feats = self.backbone.forward_intermediates(x, indices=self.indices, intermediates_only=True)
        if self.plain_vit:
            feats = [op(f) for op, f in zip(self.pyramid, feats)]
        return list(feats)


def block_count(backbone: nn.Module) -> int:
    """How many blocks (ViT) or stages (CNN, Swin) timm's `forward_intermediates` can return; 0 for a model
    without it."""
    if not hasattr(backbone, "forward_intermediates"):
        return 0
    return len(getattr(backbone, "feature_info", None) or ())


def pooled_block(block: Tensor) -> Tensor:
    """A block's NCHW output averaged over positions and layer-normalised without weights: [B, C]. The blocks'
    scales differ (a ViT's residual stream grows with depth), so each is put on one footing, as the backbone's own
    features are by its final norm."""
    return F.layer_norm(block.mean((2, 3)), block.shape[1:2])


class BlockFeatures(nn.Module):
    """The output of one block of `backbone` (1 = the first; ViT blocks, CNN stages) as `pooled_block` features,
    in place of the backbone's own pooled features: how the representation builds up with depth.

    Shape:
        - Input: `(B, 3, H, W)`; output: `(B, C)`, C the block's channels.
    """

    def __init__(self, backbone: nn.Module, block: int, name: str):
        super().__init__()
        blocks = block_count(backbone)
        if not blocks:
            raise ParameterError(
                f"block {block}: blocks are read through timm's forward_intermediates, which backbone '{name}' does "
                f"not have; probe its pooled features (no block) instead."
            )
        if not 1 <= block <= blocks:
            raise ParameterError(f"block {block} is beyond backbone '{name}': it has {blocks}; give 1 to {blocks}.")
        self.backbone, self.index, self.blocks = backbone, block - 1, blocks
        self.num_features = backbone.feature_info[self.index]["num_chs"]

    def forward(self, x: Tensor) -> Tensor:
        (block,) = self.backbone.forward_intermediates(x, indices=[self.index], intermediates_only=True)
        return pooled_block(block)
