"""timm backbones by name and the energy model built on them."""
from .energy import EnergyModel, create_energy_model
from .factory import ALIASES, create_backbone, disable_fused_attention, list_backbones, resolve

__all__ = ["EnergyModel", "create_energy_model", "create_backbone", "disable_fused_attention",
           "list_backbones", "resolve", "ALIASES"]
