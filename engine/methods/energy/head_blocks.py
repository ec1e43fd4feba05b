"""Transformer blocks between a ViT's tokens and the energy's head (`--method-arg head_blocks=K`, not the paper's):
they take the restoration's last steps of work, as MAE's decoder does, so the backbone's own top blocks need not.
They are the energy's, not the backbone's: fine-tuning, probes and export leave them behind."""

from timm.models.vision_transformer import Block, init_weights_vit_timm
from torch import Tensor, nn

from pretexts.backbones.factory import set_fused_attention
from pretexts.engine.modules.features import is_plain_vit
from pretexts.errors import ParameterError


class HeadBlocks(nn.Module):
    """K blocks shaped as the backbone's own (width, heads, MLP ratio) and a LayerNorm, on the backbone's final
    tokens; `forward(backbone, x)` is the features the energy's head reads, pooled by the backbone's own pooling."""

    def __init__(self, backbone: nn.Module, count: int, name: str):
        super().__init__()
        if not is_plain_vit(backbone) or not hasattr(backbone, "forward_head"):
            raise ParameterError(
                f"--method-arg head_blocks adds transformer blocks on a plain ViT's tokens; backbone '{name}' is "
                f"not one. Use head_blocks=0, or a ViT (vit_tiny, vit_small, ...)."
            )
        first = backbone.blocks[0]
        dim = backbone.embed_dim
        self.blocks = nn.Sequential(
            *(Block(dim, first.attn.num_heads, first.mlp.fc1.out_features / dim, qkv_bias=True) for _ in range(count))
        )
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.apply(init_weights_vit_timm)  # the ViT's own init: truncated normal 0.02, zero biases
        set_fused_attention(self, False)  # the restoration's double backward runs through them

    def forward(self, backbone: nn.Module, x: Tensor) -> Tensor:
        tokens = self.norm(self.blocks(backbone.forward_features(x)))
        return backbone.forward_head(tokens, pre_logits=True)
