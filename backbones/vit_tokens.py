"""A timm ViT's tokens and positions: its geometry, prefix tokens and the fixed 2D sin-cos table (patch sorting's
state, paper eq. 6, enters the ViT in pretexts.engine.methods.states)."""

import torch
from timm.layers import build_sincos2d_pos_embed, resample_abs_pos_embed
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
    grid = vit_geometry(backbone, name, who, tokens=False)["grid"]
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


# set on a model whose position table was loaded resampled from a checkpoint's patch grid: that (rows, cols) grid
RESAMPLED_FROM_GRID = "positions_resampled_from_grid"


def starting_positions(backbone: nn.Module) -> str | None:
    """What a ViT's patch positions hold: sincos where they are the table (a pretraining that kept it fixed, as the
    energy's default and MAE's do), at this grid or resampled from the checkpoint's (`RESAMPLED_FROM_GRID`), else
    learned; None for a backbone without a ViT's positions."""
    if not has_patch_positions(backbone):
        return None
    grid, dim = tuple(backbone.patch_embed.grid_size), backbone.pos_embed.shape[-1]
    tables = [sincos_pos_embed(grid, dim)]
    source = getattr(backbone, RESAMPLED_FROM_GRID, None)
    if source is not None:  # the table bicubically resampled as the checkpoint's positions were
        table = sincos_pos_embed(source, dim)[None]
        tables.append(resample_abs_pos_embed(table, list(grid), list(source), num_prefix_tokens=0)[0])
    rows = backbone.pos_embed.detach()[0, -grid[0] * grid[1] :]
    same = any(torch.allclose(rows, table.to(rows), atol=1e-6) for table in tables)
    return SINCOS_POSITIONS if same else LEARNED_POSITIONS


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


def vit_geometry(backbone: nn.Module, name: str, task: str = "patch-sorting", tokens: bool = True) -> dict:
    """Patch size, grid, embed dim and prefix tokens of a timm VisionTransformer, or ParameterError. `tokens`: the
    caller rebuilds the token sequence (MAE, patch sorting), so every prefix token and its position row must be ones
    `prefix_tokens` puts back; off for what touches only the patch rows (the sin-cos table: CaiT, ConViT)."""
    embed = getattr(backbone, "patch_embed", None)
    if not has_patch_positions(backbone):
        raise ParameterError(
            f"{task} needs a ViT backbone with absolute position embeddings (vit_tiny, vit_small, ...); got {name}."
        )
    known = sum(t.shape[1] for t in known_prefix(backbone))
    if tokens and known != backbone.num_prefix_tokens:  # a ViT variant with a token pretexts would drop: refuse it
        raise ParameterError(
            f"{task} cannot use {name}: it has {backbone.num_prefix_tokens} prefix tokens, of which {known} are "
            f"{'/'.join(PREFIX_TOKEN_NAMES)}; use a timm VisionTransformer (vit_*, deit_*) backbone."
        )
    grid = tuple(embed.grid_size)
    rows = grid[0] * grid[1] + (0 if getattr(backbone, "no_embed_class", False) else known)
    if tokens and backbone.pos_embed.shape[1] != rows:  # CaiT: a class token without a position row
        raise ParameterError(
            f"{task} cannot use {name}: its position table has {backbone.pos_embed.shape[1]} rows where its "
            f"{grid[0]}x{grid[1]} patches and prefix tokens need {rows}; use a timm VisionTransformer (vit_*, "
            "deit_*) backbone."
        )
    patch = embed.patch_size
    return {
        "patch": tuple(patch) if isinstance(patch, (tuple, list)) else (patch, patch),
        "grid": grid,
        "dim": backbone.embed_dim,
        "prefix": backbone.num_prefix_tokens,
    }


# timm's `_pos_embed` order: class, distillation (DeiT's distilled models), register tokens
PREFIX_TOKEN_NAMES = ("cls_token", "dist_token", "reg_token")


def known_prefix(vit: nn.Module) -> list[Tensor]:
    """The prefix token parameters [1, n, D] a ViT has, in timm's order."""
    return [t for t in (getattr(vit, name, None) for name in PREFIX_TOKEN_NAMES) if t is not None]


def prefix_tokens(vit: nn.Module, batch: int, positioned: bool = True) -> Tensor | None:
    """Class, distillation and register tokens [B, prefix, D], None when the model has none; `positioned`: plus
    their own position embeddings (where the model gives them any), which an encoder without positions leaves off."""
    tokens = [t.expand(batch, -1, -1) for t in known_prefix(vit)]
    if not tokens:
        return None
    tokens = torch.cat(tokens, dim=1)
    if positioned and not getattr(vit, "no_embed_class", False):
        tokens = tokens + vit.pos_embed[:, : tokens.shape[1]]  # the leading rows belong to the prefix
    return tokens


def with_prefix(vit: nn.Module, patches: Tensor, positioned: bool = True) -> Tensor:
    """Patch tokens [B, L, D] with the class, distillation and register tokens put in front (`prefix_tokens`)."""
    prefix = prefix_tokens(vit, patches.shape[0], positioned)
    return patches if prefix is None else torch.cat([prefix, patches], dim=1)


def patch_tokens(vit: nn.Module, tokens: Tensor) -> Tensor:
    """The patch tokens of a ViT's token sequence: the prefix (class, distillation, register) tokens dropped."""
    return tokens[:, vit.num_prefix_tokens :]


def sincos_positions(pos: Tensor, backbone: nn.Module) -> Tensor:
    """`pos` [1, prefix + L, D] with its patch rows set to the fixed 2D sin-cos table (Appendix A.2)."""
    grid = tuple(backbone.patch_embed.grid_size)
    prefix = pos.shape[1] - grid[0] * grid[1]
    pos[:, prefix:] = sincos_pos_embed(grid, pos.shape[-1]).to(pos.dtype)
    return pos
