"""timm backbones by name (aliases, the paper's models and small CPU ones)."""
from .factory import ALIASES, create_backbone, disable_fused_attention, list_backbones, resolve

__all__ = ["create_backbone", "disable_fused_attention", "list_backbones", "resolve", "ALIASES"]
