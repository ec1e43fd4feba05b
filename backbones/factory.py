"""timm backbones by name, with the paper's short aliases, built for double backward."""

import warnings
from numbers import Integral

import timm
from timm.layers import set_reentrant_ckpt, use_reentrant_ckpt
from torch import nn

from pretexts.errors import ParameterError, UnknownNameError, suggest

# short name -> (timm name, default kwargs): the paper's models (Tables 3 and 6) and small CPU ones; any other
# timm name is used as is (`resolve`)
ALIASES: dict[str, tuple[str, dict]] = {
    "vit_tiny": ("vit_tiny_patch16_224", {"patch_size": 4, "img_size": 32}),
    "vit_small": ("vit_small_patch16_224", {}),
    "vit_base": ("vit_base_patch16_224", {}),
    "vit_large": ("vit_large_patch16_224", {}),
    "swin_t": ("swin_tiny_patch4_window7_224", {}),
    "convnext_t": ("convnext_tiny", {}),
    "convnext_atto": ("convnext_atto", {}),  # the default: LayerNorm, 3.7 M params, learns within CPU minutes
    "resnet50": ("resnet50", {}),
    "resnet18": ("resnet18", {}),
}


def list_backbones(pattern: str = "*") -> list[str]:
    """The short aliases and every timm architecture matching `pattern`.

    Args:
        pattern: A shell-style pattern (`fnmatch`): "vit_*", "*convnext*"; "*" lists them all.

    Returns:
        The matching names, sorted: aliases (vit_tiny, convnext_atto, ...) and timm's own, a plugin's included once
            its package is imported.
    """
    import fnmatch

    aliases = [a for a in ALIASES if fnmatch.fnmatch(a, pattern)]
    return sorted(set(aliases) | set(timm.list_models(pattern)))


def resolve(name: str) -> tuple[str, dict]:
    """Alias or timm name -> (timm name, default kwargs); an unknown name suggests close ones.

    A name timm does not know yet may be a plugin's (a timm `@register_model` in a plugin package): the plugins are
    loaded before it is refused (`known_to_timm`), so every command that rebuilds a checkpoint's backbone finds it,
    not only those that loaded a registry first."""
    if name in ALIASES:
        timm_name, defaults = ALIASES[name]
        return timm_name, dict(defaults)
    if known_to_timm(name):
        return name, {}
    raise UnknownNameError(
        f"unknown backbone '{name}'.{suggest(name, list_backbones())} "
        f"Use one of the aliases ({', '.join(ALIASES)}), any timm model name or a plugin's.{plugin_failures()}"
    )


def known_to_timm(name: str) -> bool:
    """Whether timm builds `name`, a backbone plugin's (its package's `@register_model`) included: the plugins are
    loaded when timm does not know the name yet."""
    if not timm.is_model(name):
        load_backbone_plugins()
    return timm.is_model(name)


def plugin_failures() -> str:
    """' A backbone plugin failed to load: <where and why>.' for each broken one (`BROKEN`), to end the message
    that refuses a name timm does not know; "" when none is."""
    return "".join(f" A backbone plugin failed to load: {why}." for why in BROKEN.values())


BACKBONE_GROUP = "pretexts.backbones"  # entry points of packages that add timm models and nothing else
BROKEN: dict[str, str] = {}  # a backbone entry point that failed to import -> where and why
plugins_loaded = False  # set by the first `load_backbone_plugins`: the plugins are imported once a process


def load_backbone_plugins() -> None:
    """Import the plugins, where a package's `@register_model` runs: every registry's (their built-ins first, so a
    built-in name still wins) and the entry points of `pretexts.backbones`, a failing one recorded in `BROKEN`.
    Once a process: a later call imports nothing (a plugin installed since is found by the next process)."""
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True  # first: a plugin that resolves a backbone as it is imported does not load them again
    from pretexts.plugins import load_one, plugin_entry_points
    from pretexts.registry import METHODS, PROBES, TASKS

    for registry in (TASKS, METHODS, PROBES):
        registry.load()
    for ep in plugin_entry_points(BACKBONE_GROUP):
        if (why := load_one(ep)) is not None:  # a plugin's bug must not hide the built-in backbones
            BROKEN[ep.name] = why


def disable_fused_attention(model: nn.Module) -> nn.Module:
    """Fused SDPA kernels have no double backward; timm's attention layers fall back to plain math."""
    return set_fused_attention(model, False)


def set_fused_attention(model: nn.Module, enabled: bool) -> nn.Module:
    """Switch timm's fused attention; on only where nothing needs a double backward (finite differences)."""
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = enabled
    return model


def pooled_width(backbone: nn.Module) -> int:
    """The width of the pooled features a backbone built with num_classes=0 returns: timm's `head_hidden_size`
    (MobileNetV3/V4, GhostNet, MambaOut, HGNetV2 and EfficientViT add a pre-logits layer after the last stage),
    else `num_features`, which is also the width of the unpooled `forward_features` map."""
    return getattr(backbone, "head_hidden_size", None) or backbone.num_features


def running_stat_norms(model: nn.Module) -> list[str]:
    """Names of the norm layers that update running statistics in training mode (BatchNorm and timm's subclasses)."""
    norms = nn.modules.batchnorm._NormBase
    return [name for name, m in model.named_modules() if isinstance(m, norms) and m.track_running_stats]


def set_grad_checkpointing(model: nn.Module, enabled: bool = True) -> nn.Module:
    """timm's activation checkpointing, non-reentrant: the reentrant kind breaks `torch.autograd.grad`.

    timm picks the kind from a process-wide flag (TIMM_REENTRANT_CKPT=1 turns reentrant on); it is
    switched off here, with a warning, since no energy model can train with it. A backbone with BatchNorm keeps
    its activations, with a warning: the backward's recomputation of a BatchNorm in training mode updates its
    running statistics again (twice per forward in the energy method's double backward), which would change the
    statistics a memory option must leave alone.
    """
    if not hasattr(model, "set_grad_checkpointing"):
        raise ParameterError(f"backbone {type(model).__name__} has no gradient checkpointing; leave it off.")
    if enabled and (norms := running_stat_norms(model)):
        warnings.warn(
            f"--grad-checkpointing is off for backbone {type(model).__name__}: recomputing its BatchNorm layers "
            f"({norms[0]}, ...) in the backward would update their running statistics again.",
            stacklevel=2,
        )
        return model
    if enabled and use_reentrant_ckpt():
        warnings.warn(
            "timm's reentrant checkpointing cannot take torch.autograd.grad; switched to non-reentrant.", stacklevel=2
        )
        set_reentrant_ckpt(False)
    model.set_grad_checkpointing(enabled)
    return model


def create_backbone(name: str, img_size: int | None = None, **kwargs) -> nn.Module:
    """A timm model that returns pooled features [B, pooled_width(model)] (num_classes=0), never pretrained.

    `img_size` reaches models that take it (ViT, Swin) and is ignored by those that do not (CNNs).
    None kwargs are dropped, so CLI defaults never override an alias's own.

    Args:
        name: A short alias (`list_backbones()`: vit_tiny, convnext_atto, resnet18, ...), a timm model name or a
            backbone plugin's.
        img_size: The image side the model is built for (ViTs fix their patch grid with it); None: the alias's or
            timm's default. A ViT's must be a multiple of its patch size.
        **kwargs (Any): Passed on to `timm.create_model` over the alias's defaults (`depth=2`, `patch_size=8`,
            `drop_path_rate=0.1`, `global_pool="token"`, ...).

    Returns:
        The timm model at random init, its fused attention off (the energy method's double backward needs plain
            attention).

    Raises:
        UnknownNameError: No alias, timm model or plugin has the name (close names are suggested).
        ParameterError: `img_size` is no whole number or not a multiple of the patch size, or timm cannot build
            the model with these arguments.
    """
    if img_size is not None and (not isinstance(img_size, Integral) or isinstance(img_size, bool) or img_size < 1):
        raise ParameterError(f"img_size must be a whole number of pixels or None, got {img_size!r}.")
    timm_name, params = resolve(name)
    params.update({k: v for k, v in kwargs.items() if v is not None})
    if img_size is not None:
        params["img_size"] = img_size
    params.setdefault("num_classes", 0)
    try:
        try:
            model = timm.create_model(timm_name, pretrained=False, **params)
        except TypeError as err:
            if "img_size" not in str(err) or "img_size" not in params:
                raise ParameterError(f"backbone '{name}': {err}") from None
            params.pop("img_size")  # CNNs take any size
            model = timm.create_model(timm_name, pretrained=False, **params)
    except AssertionError as err:
        if kwargs.get("global_pool") == "token":  # timm's own message names no option
            raise ParameterError(
                f"backbone '{name}' has no class token: global_pool 'token' is for ViTs; use avg."
            ) from None
        raise ParameterError(f"backbone '{name}' cannot be built with {params}: {err}") from None
    _check_patch_grid(name, model, img_size)
    return disable_fused_attention(model)


def _check_patch_grid(name: str, model: nn.Module, img_size: int | None) -> None:
    embed = getattr(model, "patch_embed", None)
    patch = getattr(embed, "patch_size", None)
    if img_size is None or patch is None:
        return
    patch = patch[0] if isinstance(patch, (tuple, list)) else patch
    if img_size % patch:
        raise ParameterError(
            f"image size {img_size} is not divisible by the patch size {patch} of backbone '{name}'; "
            f"use a multiple of {patch}, e.g. {img_size - img_size % patch or patch}."
        )
