"""The mean and std a backbone's input is normalised with: the one place they are read."""

from torch import nn

# timm's pretrained configs carry their own; a model without one gets ImageNet's (timm's default too)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def normalisation(backbone: nn.Module) -> tuple[tuple, tuple]:
    """(mean, std) per channel from the backbone's timm `pretrained_cfg`, ImageNet's where it has none.

    Pretraining normalises with these, so fine-tuning, probing, export and the monitor read them here too."""
    cfg = getattr(backbone, "pretrained_cfg", None) or {}
    return tuple(cfg.get("mean", IMAGENET_MEAN)), tuple(cfg.get("std", IMAGENET_STD))
