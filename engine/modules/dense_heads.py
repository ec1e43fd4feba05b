"""Dense heads over 4 feature maps (`features.Features`): UperNet (PPM + FPN) and a light linear head.

No maintained head library fits the pinned stack (mmsegmentation needs mmcv), so UperNet is a compact
own implementation of Xiao et al.'s PPM + FPN as MAE/BEiT use it for ADE20K.
"""

import torch
import torch.nn.functional as F
from torch import nn


def conv_bn(cin: int, cout: int, k: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True))


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
            levels[i - 1] = levels[i - 1] + F.interpolate(
                levels[i], levels[i - 1].shape[-2:], mode="bilinear", align_corners=False
            )
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
