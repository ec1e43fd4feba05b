"""A timm ViT forward that takes the position embeddings as an input, for patch sorting (paper, eq. 6)."""
import torch
from timm.layers import build_sincos2d_pos_embed
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from pretexts.errors import ParameterError


def sincos_pos_embed(grid: int | tuple[int, int], dim: int, device=None) -> Tensor:
    """The fixed 2D sin-cos table [rows * cols, dim], row-major like timm's patch order (MoCo v3 style).

    Patch sorting shuffles this table (paper, Appendix A.2); fine-tuning can start from it too.
    """
    rows, cols = (grid, grid) if isinstance(grid, int) else grid
    if dim % 4:
        raise ParameterError(f"a 2D sin-cos position embedding needs a width divisible by 4, got {dim}.")
    return build_sincos2d_pos_embed([rows, cols], dim=dim, device=device)


def vit_geometry(backbone: nn.Module, name: str, task: str = "patch-sorting") -> dict:
    """Patch size, grid, embed dim and prefix tokens of a timm VisionTransformer, or ParameterError."""
    embed = getattr(backbone, "patch_embed", None)
    needs = ("pos_embed", "blocks", "norm", "forward_head", "num_prefix_tokens")
    if (embed is None or getattr(embed, "grid_size", None) is None or getattr(backbone, "pos_embed", None) is None
            or not all(hasattr(backbone, attr) for attr in needs)):
        raise ParameterError(
            f"{task} needs a ViT backbone with absolute position embeddings (vit_tiny, vit_small, ...); got {name}.")
    patch = embed.patch_size
    return {
        "patch": tuple(patch) if isinstance(patch, (tuple, list)) else (patch, patch),
        "grid": tuple(embed.grid_size),
        "dim": backbone.embed_dim,
        "prefix": backbone.num_prefix_tokens,
    }


def prefix_tokens(vit: nn.Module, batch: int) -> Tensor | None:
    """Class and register tokens with their own position embeddings (zeros when the model has none)."""
    tokens = [t.expand(batch, -1, -1) for t in (vit.cls_token, getattr(vit, "reg_token", None)) if t is not None]
    if not tokens:
        return None
    tokens = torch.cat(tokens, dim=1)
    if not getattr(vit, "no_embed_class", False):
        tokens = tokens + vit.pos_embed[:, : tokens.shape[1]]  # the leading rows belong to the prefix
    return tokens


def vit_energy_with_pos(model, images: Tensor, pos: Tensor, keep: Tensor | None = None) -> Tensor:
    """Energies [B] of images [B,3,H,W] in [0,1] when patch i carries the embedding pos[:, i].

    pos: [B, L, D] per-image position embeddings, replacing the model's own patch embeddings.
    keep: optional [B, K] token indices that enter the blocks (patch dropout); the others are dropped,
    so the energy, and its gradient, does not depend on their position embeddings.
    The model's own `patch_drop` is skipped; `pos_drop`, `norm_pre`, blocks, `norm` and the pooled
    head run as in timm's forward. Attention runs on the MATH SDPA backend (double backward).
    """
    vit = model.backbone
    with sdpa_kernel(SDPBackend.MATH):
        x = vit.patch_embed(model.normalize(images))
        if x.ndim == 4:  # dynamic_img_size models keep the grid: NHWC
            x = x.flatten(1, 2)
        x = x + pos.to(x.dtype)
        if keep is not None:
            x = x.gather(1, keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        prefix = prefix_tokens(vit, x.shape[0])
        if prefix is not None:
            x = torch.cat([prefix.to(x.dtype), x], dim=1)
        x = vit.norm_pre(vit.pos_drop(x))
        x = vit.norm(vit.blocks(x))
        return model.score(vit.forward_head(x, pre_logits=True))


def sincos_positions(pos: Tensor, backbone: nn.Module) -> Tensor:
    """`pos` [1, prefix + L, D] with its patch rows set to the fixed 2D sin-cos table (Appendix A.2)."""
    grid = tuple(backbone.patch_embed.grid_size)
    prefix = pos.shape[1] - grid[0] * grid[1]
    pos[:, prefix:] = sincos_pos_embed(grid, pos.shape[-1]).to(pos.dtype)
    return pos
