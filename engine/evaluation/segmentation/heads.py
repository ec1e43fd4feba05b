"""Backbone -> 4-scale features -> UperNet (PPM + FPN) or a light linear head.

No maintained head library fits the pinned stack (mmsegmentation needs mmcv), so UperNet is a compact
own implementation of Xiao et al.'s PPM + FPN as MAE/BEiT use it for ADE20K.
"""
import torch
import torch.nn.functional as F
from torch import nn


def conv_bn(cin: int, cout: int, k: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True))


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
            self.pyramid = nn.ModuleList([
                nn.Sequential(nn.ConvTranspose2d(d, d, 2, 2), nn.BatchNorm2d(d), nn.GELU(), nn.ConvTranspose2d(d, d, 2, 2)),
                nn.ConvTranspose2d(d, d, 2, 2), nn.Identity(), nn.MaxPool2d(2)])
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


class UperNet(nn.Module):
    """Pyramid pooling on the coarsest map, top-down FPN, fuse all levels at the finest (Xiao et al. 2018)."""

    def __init__(self, channels: list[int], num_classes: int, width: int = 128, bins=(1, 2, 3, 6)):
        super().__init__()
        self.ppm = nn.ModuleList(nn.Sequential(nn.AdaptiveAvgPool2d(b), conv_bn(channels[-1], width, 1)) for b in bins)
        self.bottleneck = conv_bn(channels[-1] + len(bins) * width, width)
        self.lateral = nn.ModuleList(conv_bn(c, width, 1) for c in channels[:-1])
        self.fpn = nn.ModuleList(conv_bn(width, width) for _ in channels[:-1])
        self.fuse = conv_bn(len(channels) * width, width)
        self.classify = nn.Conv2d(width, num_classes, 1)

    def forward(self, feats):
        top = feats[-1]
        pooled = [F.interpolate(p(top), top.shape[-2:], mode="bilinear", align_corners=False) for p in self.ppm]
        levels = [lat(f) for lat, f in zip(self.lateral, feats[:-1])] + [self.bottleneck(torch.cat([top] + pooled, 1))]
        for i in range(len(levels) - 1, 0, -1):  # top-down pathway
            levels[i - 1] = levels[i - 1] + F.interpolate(levels[i], levels[i - 1].shape[-2:], mode="bilinear", align_corners=False)
        outs = [conv(level) for conv, level in zip(self.fpn, levels[:-1])] + [levels[-1]]
        size = outs[0].shape[-2:]
        outs = [outs[0]] + [F.interpolate(o, size, mode="bilinear", align_corners=False) for o in outs[1:]]
        return self.classify(self.fuse(torch.cat(outs, 1)))


class LinearHead(nn.Module):
    """BatchNorm + 1x1 conv on the finest map: the fast option."""

    def __init__(self, channels: list[int], num_classes: int):
        super().__init__()
        self.classify = nn.Sequential(nn.BatchNorm2d(channels[0]), nn.Conv2d(channels[0], num_classes, 1))

    def forward(self, feats):
        return self.classify(feats[0])


class Segmenter(nn.Module):
    def __init__(self, backbone: nn.Module, head: str, num_classes: int, img_size: int):
        super().__init__()
        self.features = Features(backbone, img_size)
        self.head = (UperNet if head == "upernet" else LinearHead)(self.features.channels, num_classes)

    def forward(self, x):
        logits = self.head(self.features(x))
        return F.interpolate(logits, x.shape[-2:], mode="bilinear", align_corners=False)
