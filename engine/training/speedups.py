"""Options that trade memory for time, applied to a freshly built model before training (and before DDP)."""
import torch
from torch import nn

from pretexts.engine.methods.energy.model import EnergyModel
from pretexts.backbones.factory import set_fused_attention, set_grad_checkpointing
from pretexts.errors import ParameterError

from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.methods.energy.grad_modes import unsupported_layers


def apply_speedups(model: nn.Module, cfg: PretrainConfig) -> nn.Module:
    """Gradient checkpointing, channels_last, and what the finite-difference mode allows: fused
    attention and torch.compile (neither has a double backward, so the exact mode keeps them off)."""
    backbone = getattr(model, "backbone", model)
    if cfg.grad_checkpointing:
        set_grad_checkpointing(backbone, True)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if cfg.grad_mode == "finite-difference" and isinstance(model, EnergyModel):
        bad = unsupported_layers(backbone)
        if bad:
            raise ParameterError(
                f"--grad-mode finite-difference needs a smooth, per-image energy, but backbone '{cfg.backbone}' "
                f"has ReLU/max-pool kinks or BatchNorm ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}); "
                f"use --grad-mode exact, or a LayerNorm+GELU backbone (ViT, Swin, ConvNeXt).")
        set_fused_attention(backbone, True)
        model.math_attention = False
    if cfg.compile:
        backbone.compile(backend=cfg.compile)  # in place: the state_dict keeps its keys
    return model
