"""timm backbones by name (aliases, the paper's models and small CPU ones), their input normalisation
(`normalisation`), ViT token and patch helpers (`vit_tokens`, `patches`)."""

from .factory import ALIASES, create_backbone, disable_fused_attention, list_backbones, resolve

__all__ = ["create_backbone", "disable_fused_attention", "list_backbones", "resolve", "ALIASES"]
