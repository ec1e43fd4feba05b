"""A timm ViT's tokens and positions: its geometry, prefix tokens and the fixed 2D sin-cos table (patch sorting's
state, paper eq. 6, enters the ViT in pretexts.engine.methods.states)."""

import torch
from timm.layers import build_sincos2d_pos_embed
from torch import Tensor, nn

from pretexts.errors import ParameterError

# a ViT's patch positions at the start of a run: auto resolves by the backbone (`resolved_positions`)
AUTO_POSITIONS, LEARNED_POSITIONS, SINCOS_POSITIONS = "auto", "learned", "sincos"
POSITIONS = (AUTO_POSITIONS, LEARNED_POSITIONS, SINCOS_POSITIONS)


def sincos_pos_embed(grid: int | tuple[int, int], dim: int, device=None) -> Tensor:
    """The fixed 2D sin-cos table [rows * cols, dim], row-major like timm's patch order (MoCo v3 style).

    Patch sorting shuffles this table (paper, Appendix A.2); fine-tuning can start from it too.
    """
    rows, cols = (grid, grid) if isinstance(grid, int) else grid
    if dim % 4:
        raise ParameterError(f"a 2D sin-cos position embedding needs a width divisible by 4, got {dim}.")
    return build_sincos2d_pos_embed([rows, cols], dim=dim, device=device)


def fix_sincos_positions(backbone: nn.Module, name: str, who: str, frozen: bool = True) -> None:
    """Set a timm ViT's patch position embeddings to the fixed 2D sin-cos table (its prefix rows to 0) and, when
    `frozen`, stop their training, as MAE's and MoCo v3's encoders have them; fine-tuning trains them on from the
    table."""
    grid = vit_geometry(backbone, name, who)["grid"]
    with torch.no_grad():
        own = backbone.pos_embed.shape[1] - grid[0] * grid[1]
        backbone.pos_embed[:, own:] = sincos_pos_embed(grid, backbone.embed_dim).to(backbone.pos_embed.dtype)
        backbone.pos_embed[:, :own] = 0
    backbone.pos_embed.requires_grad_(not frozen)


def resolved_positions(positions: str, backbone: nn.Module) -> str:
    """`positions`, with auto resolved: the sin-cos table for a ViT with absolute positions (the energy's attention
    turns local with it, as MAE's encoder's does; docs/results/representation.md), learned (nothing changed) for
    every other backbone."""
    if positions not in POSITIONS:
        raise ParameterError(f"positions must be {', '.join(POSITIONS[:-1])} or {POSITIONS[-1]}; got {positions!r}.")
    if positions != AUTO_POSITIONS:
        return positions
    return SINCOS_POSITIONS if has_patch_positions(backbone) else LEARNED_POSITIONS


def starting_positions(backbone: nn.Module) -> str | None:
    """What a ViT's patch positions hold: sincos where they are exactly the table (a pretraining that kept it fixed,
    as the energy's default and MAE's do), else learned; None for a backbone without a ViT's positions."""
    if not has_patch_positions(backbone):
        return None
    grid = tuple(backbone.patch_embed.grid_size)
    table = sincos_pos_embed(grid, backbone.pos_embed.shape[-1]).to(backbone.pos_embed)
    rows = backbone.pos_embed.detach()[0, -grid[0] * grid[1] :]
    return SINCOS_POSITIONS if torch.allclose(rows, table, atol=1e-6) else LEARNED_POSITIONS


def has_patch_positions(backbone: nn.Module) -> bool:
    """A timm VisionTransformer with absolute position embeddings on a fixed patch grid (vit_tiny, deit_small, ...;
    not Swin's relative ones, nor a ViT built with pos_embed off)."""
    embed = getattr(backbone, "patch_embed", None)
    needs = ("pos_embed", "blocks", "norm", "forward_head", "num_prefix_tokens")
    return (
        embed is not None
        and getattr(embed, "grid_size", None) is not None
        and getattr(backbone, "pos_embed", None) is not None
        and all(hasattr(backbone, attr) for attr in needs)
    )


def vit_geometry(backbone: nn.Module, name: str, task: str = "patch-sorting") -> dict:
    """Patch size, grid, embed dim and prefix tokens of a timm VisionTransformer, or ParameterError."""
    embed = getattr(backbone, "patch_embed", None)
    if not has_patch_positions(backbone):
        raise ParameterError(
            f"{task} needs a ViT backbone with absolute position embeddings (vit_tiny, vit_small, ...); got {name}."
        )
    patch = embed.patch_size
    return {
        "patch": tuple(patch) if isinstance(patch, (tuple, list)) else (patch, patch),
        "grid": tuple(embed.grid_size),
        "dim": backbone.embed_dim,
        "prefix": backbone.num_prefix_tokens,
    }


def prefix_tokens(vit: nn.Module, batch: int, positioned: bool = True) -> Tensor | None:
    """Class and register tokens [B, prefix, D], None when the model has none; `positioned`: plus their own
    position embeddings (where the model gives them any), which an encoder without positions leaves off."""
    tokens = [t.expand(batch, -1, -1) for t in (vit.cls_token, getattr(vit, "reg_token", None)) if t is not None]
    if not tokens:
        return None
    tokens = torch.cat(tokens, dim=1)
    if positioned and not getattr(vit, "no_embed_class", False):
        tokens = tokens + vit.pos_embed[:, : tokens.shape[1]]  # the leading rows belong to the prefix
    return tokens


def with_prefix(vit: nn.Module, patches: Tensor, positioned: bool = True) -> Tensor:
    """Patch tokens [B, L, D] with the class and register tokens put in front (`prefix_tokens`)."""
    prefix = prefix_tokens(vit, patches.shape[0], positioned)
    return patches if prefix is None else torch.cat([prefix, patches], dim=1)


def patch_tokens(vit: nn.Module, tokens: Tensor) -> Tensor:
    """The patch tokens of a ViT's token sequence: the class and register tokens dropped."""
    return tokens[:, vit.num_prefix_tokens :]


def sincos_positions(pos: Tensor, backbone: nn.Module) -> Tensor:
    """`pos` [1, prefix + L, D] with its patch rows set to the fixed 2D sin-cos table (Appendix A.2)."""
    grid = tuple(backbone.patch_embed.grid_size)
    prefix = pos.shape[1] - grid[0] * grid[1]
    pos[:, prefix:] = sincos_pos_embed(grid, pos.shape[-1]).to(pos.dtype)
    return pos
