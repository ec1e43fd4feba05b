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


class StartsPositions:
    """Mixin of a `Method` whose `method_params` hold `"positions": POSITIONS_PARAM`."""

    def start_positions(self, backbone: nn.Module) -> None:
        """Apply `positions` to the freshly built `backbone`; method_args (config.json) records what auto resolved
        to. ParameterError for sincos on a backbone without a ViT's positions."""
        cfg, who = self.cfg, f"method {self.cfg.method}"
        resolved = resolve(self.args["positions"], backbone)
        if resolved == SINCOS_POSITIONS:
            if not has_patch_positions(backbone):
                raise ParameterError(
                    f"{who}: positions=sincos sets a ViT's absolute position embeddings, and {cfg.backbone} has none; "
                    f"leave positions at auto (it changes nothing on such a backbone), or use a ViT (vit_tiny, "
                    f"vit_small)."
                )
            fix_sincos_positions(backbone, cfg.backbone, f"{who}: positions=sincos")
        self.args["positions"] = resolved

    def resolve(self, model: nn.Module) -> dict:
        """A ViT's positions as the run starts them (auto resolved when the model was built), for the start line."""
        return {"positions": self.args["positions"]} if has_patch_positions(model.backbone) else {}
