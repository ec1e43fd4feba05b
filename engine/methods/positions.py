"""A ViT's starting patch positions for the decoder baselines (`--method ae`, `--method simmim`): the same choice as
the energy method's `positions` (engine/methods/energy/params.py), so every method, MAE and the random-init row of
`pretexts compare` start a ViT from the same table."""

from torch import nn

from pretexts.backbones.vit_tokens import (
    AUTO_POSITIONS,
    POSITIONS,
    SINCOS_POSITIONS,
    fix_sincos_positions,
    has_patch_positions,
)
from pretexts.backbones.vit_tokens import resolved_positions as resolve
from pretexts.errors import ParameterError
from pretexts.params import Param

POSITIONS_PARAM = Param(
    AUTO_POSITIONS,
    str,
    choices=POSITIONS,
    help="A ViT's patch positions: sincos (the fixed 2D sin-cos table, frozen, as the energy's and MAE's encoders "
    "start; fine-tuning trains them on), learned (timm's, from random) or auto: sincos for a ViT with absolute "
    "positions, else learned.",
)


def start_positions(backbone: nn.Module, name: str, positions: str, who: str) -> str:
    """Resolve `positions` (auto: sincos for a ViT with absolute positions, else learned) and apply it to the
    freshly built `backbone`; returns what it resolved to, for the run's method_args. ParameterError for sincos on
    a backbone without a ViT's positions."""
    resolved = resolve(positions, backbone)
    if resolved == SINCOS_POSITIONS:
        if not has_patch_positions(backbone):
            raise ParameterError(
                f"{who}: positions=sincos sets a ViT's absolute position embeddings, and {name} has none; leave "
                f"positions at auto (it changes nothing on such a backbone), or use a ViT (vit_tiny, vit_small)."
            )
        fix_sincos_positions(backbone, name, f"{who}: positions=sincos")
    return resolved
