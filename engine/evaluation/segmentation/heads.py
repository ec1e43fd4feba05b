"""The segmentation model: backbone -> 4-scale features -> UperNet (PPM + FPN) or a light linear head, the
shared blocks of `engine.modules`, upsampled to the image."""

import torch.nn.functional as F
from torch import nn

from pretexts.engine.modules.dense_heads import LinearHead, UperNet
from pretexts.engine.modules.features import Features


class Segmenter(nn.Module):
    def __init__(self, backbone: nn.Module, head: str, num_classes: int, img_size: int):
        super().__init__()
        self.features = Features(backbone, img_size)
        self.head = (UperNet if head == "upernet" else LinearHead)(self.features.channels, num_classes)

    def forward(self, x):
        logits = self.head(self.features(x))
        return F.interpolate(logits, x.shape[-2:], mode="bilinear", align_corners=False)
