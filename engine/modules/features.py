"""4 feature maps from any timm backbone: what UperNet reads, for segmentation and the AE's pyramid decoder."""

import torch
from torch import nn


def is_plain_vit(backbone: nn.Module) -> bool:
    """A ViT with one token grid (no stages of its own); Swin has `layers`, CNNs no patch embedding."""
    return hasattr(backbone, "blocks") and hasattr(backbone, "patch_embed") and not hasattr(backbone, "layers")


class Features(nn.Module):
    """4 feature maps from any timm model via `forward_intermediates`.

    Plain ViTs: evenly spaced blocks reshaped to a grid, then MAE/BEiT's pyramid (deconv x4, deconv x2,
    identity, maxpool) to strides 4..32 of the patch grid. CNNs/Swin: their last 4 stages as they are.
    """

    def __init__(self, backbone: nn.Module, img_size: int):
        super().__init__()
        self.backbone = backbone
        self.plain_vit = is_plain_vit(backbone)
        if self.plain_vit:
            depth = len(backbone.blocks)
            self.indices = [depth // 4 - 1, depth // 2 - 1, 3 * depth // 4 - 1, depth - 1]
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
