"""A pretraining checkpoint's backbone as a plain timm model: for fine-tuning, probing and export."""

import math
import warnings

from timm.layers import resample_abs_pos_embed
from timm.models.swin_transformer import SwinTransformer
from timm.models.swin_transformer import checkpoint_filter_fn as swin_checkpoint_filter
from torch import nn

from pretexts import backbones
from pretexts.backbones.factory import set_fused_attention
from pretexts.backbones.vit_tokens import (
    LEARNED_POSITIONS,
    RESAMPLED_FROM_GRID,
    SINCOS_POSITIONS,
    fix_sincos_positions,
    resolved_positions,
)
from pretexts.engine.data.labelled_data import labelled_splits
from pretexts.engine.training.checkpoint import check_shapes, load_checkpoint
from pretexts.errors import CheckpointError, DataError, ParameterError, UnknownNameError
from pretexts.registry import METHODS, get_pretext_class

PREFIX = "backbone."
SWIN_TABLES_RESIZED = "relative_tables_resized"  # set on a Swin whose tables were resized for its new windows


def timm_spec(
    name: str, img_size: int, backbone: nn.Module | None = None, global_pool: str | None = None
) -> tuple[str, dict]:
    """(timm name, kwargs) that `timm.create_model` needs to rebuild the backbone `name` at `img_size` (and with the
    pretraining's `global_pool`, where it set one).

    img_size reaches only models that take it (ViT, Swin have a patch embedding); CNNs take any size.
    """
    timm_name, kwargs = backbones.resolve(name)
    if global_pool is not None:
        kwargs["global_pool"] = global_pool
    backbone = backbone if backbone is not None else backbones.create_backbone(name, img_size=img_size)
    if getattr(getattr(backbone, "patch_embed", None), "img_size", None) is not None:
        kwargs["img_size"] = img_size
    else:
        kwargs.pop("img_size", None)
    return timm_name, kwargs


def backbone_weights(ckpt: dict, backbone: nn.Module) -> dict:
    """The `backbone.*` weights of a checkpoint, as the backbone alone saw them in pretraining, a ViT's position
    table resampled to `backbone`'s patch grid where that is another size (`resample_positions`).

    A task that moves positions (patch sorting, `state_kind == "positions"`) never reads the ViT's
    learnable patch position embeddings; the method that trained it says what fine-tuning starts from
    (`fine_tuning_positions`: the energy method's fixed sin-cos table, the AE's zeros).
    """
    state = {k[len(PREFIX) :]: v for k, v in ckpt["model"].items() if k.startswith(PREFIX)}
    if not state:
        raise CheckpointError("the checkpoint holds no backbone weights (no 'backbone.*' keys).")
    resample_positions(state, backbone)
    saved = ckpt["config"]
    if "pos_embed" in state and task_state_kind(saved.get("task")) == "positions":
        method = METHODS.get(saved.get("method", "energy"))
        state["pos_embed"] = method.fine_tuning_positions(state["pos_embed"].clone(), backbone)
        if hasattr(backbone, RESAMPLED_FROM_GRID):  # built for this grid: nothing of the resample is left
            delattr(backbone, RESAMPLED_FROM_GRID)
    return state


def position_prefix(model: nn.Module) -> int:
    """How many leading rows of a timm ViT's `pos_embed` belong to its class/register tokens (timm's rule)."""
    return 0 if getattr(model, "no_embed_class", False) else getattr(model, "num_prefix_tokens", 1)


def resample_positions(state: dict, model: nn.Module) -> dict:
    """`state`'s absolute position table resampled (bicubic) to `model`'s patch grid when their sizes differ, as
    timm's ViT checkpoint filter and MAE's `interpolate_pos_embed` do for fine-tuning at another resolution; the
    prefix tokens' rows are kept, and the model records the grid they came from (`RESAMPLED_FROM_GRID`). A Swin's
    relative position bias tables go through timm's Swin checkpoint filter, as timm's own loading at another
    img_size does. Anything without such tables is left as it is."""
    if isinstance(model, SwinTransformer):
        return resized_swin_tables(state, model)
    table, own = state.get("pos_embed"), getattr(model, "pos_embed", None)
    if table is None or not hasattr(own, "shape") or table.shape == own.shape or not hasattr(model, "patch_embed"):
        return state
    grid, prefix = list(model.patch_embed.grid_size), position_prefix(model)
    side = math.isqrt(table.shape[1] - prefix)  # timm's filter takes a checkpoint's grid as square too
    state["pos_embed"] = resample_abs_pos_embed(table, new_size=grid, num_prefix_tokens=prefix)
    setattr(model, RESAMPLED_FROM_GRID, (side, side))
    return state


def resized_swin_tables(state: dict, model: nn.Module) -> dict:
    """A Swin's `relative_position_bias_table`s resized to `model`'s windows by timm's Swin `checkpoint_filter_fn`
    (BEiT's interpolation), where the image size changed them."""
    tables = {k: v for k, v in state.items() if k.endswith("relative_position_bias_table")}
    own = model.state_dict()
    if all(k in own and own[k].shape == v.shape for k, v in tables.items()):
        return state
    with warnings.catch_warnings():  # torch's notes on timm's interpolator's indexing say nothing to the user
        warnings.simplefilter("ignore", UserWarning)
        state.update(swin_checkpoint_filter(tables, model))
    setattr(model, SWIN_TABLES_RESIZED, True)
    return state


def resampled_positions_note(model: nn.Module, from_size: int, to_size: int) -> str | None:
    """The line telling that a ViT's position table or a Swin's relative position tables were resampled from the
    checkpoint's size; None if they were not (a size kept, a CNN, patch sorting's table built for the new grid)."""
    if not from_size or from_size == to_size:
        return None
    if isinstance(model, SwinTransformer):
        if not getattr(model, SWIN_TABLES_RESIZED, False):  # the windows, and so the tables, kept their size
            return None
        windows = "/".join(str(stage.blocks[0].window_size[0]) for stage in model.layers)
        return (
            f"relative position bias tables resized from {from_size} to {to_size} px (windows {windows}, "
            f"as timm's Swin checkpoint filter)"
        )
    if getattr(model, RESAMPLED_FROM_GRID, None) is None:
        return None
    patch = model.patch_embed.patch_size[0]
    return (
        f"position embeddings resampled from {from_size} to {to_size} px ({from_size // patch}x{from_size // patch} "
        f"to {to_size // patch}x{to_size // patch} patches, bicubic, as MAE's interpolate_pos_embed)"
    )


def repooled_note(global_pool: str | None, model: nn.Module, ckpt: dict) -> str | None:
    """The line telling that the classifier pools otherwise than pretraining did and so starts a final norm afresh
    (`moved_norm`); None where nothing moved (the pooling the backbone had anyway, a CNN's avg)."""
    state = {k[len(PREFIX) :] for k in ckpt["model"] if k.startswith(PREFIX)}
    moved = moved_norm(state, set(model.state_dict())) if global_pool else None
    if moved is None:
        return None
    return (
        f"pooling {global_pool}: the checkpoint's final norm ({moved[0]}) is left out and {moved[1]} starts afresh, "
        f"as MAE's fine-tuning starts fc_norm"
    )


def task_state_kind(name: str | None) -> str:
    """What the pretraining task moved; a task no longer installed counts as pixels (nothing to adapt)."""
    try:
        return get_pretext_class(name).state_kind if name else "pixels"
    except UnknownNameError:
        return "pixels"


def classifier_prefix(model: nn.Module) -> str:
    """'head', 'head.fc' or 'fc': where timm keeps a model's classifier."""
    return (getattr(model, "pretrained_cfg", None) or {}).get("classifier", "head")


def load_pretrained(model: nn.Module, ckpt: dict, path, img_size: int | None = None) -> nn.Module:
    """Load a checkpoint's backbone into `model` (a timm model built at `img_size`, default the checkpoint's), strict
    apart from its classifier, and apart from the final norm of a ViT built with another global_pool than
    pretraining's, which starts afresh (`moved_final_norm`: only then do the two hold it at different places)."""
    state = backbone_weights(ckpt, model)
    fresh = moved_final_norm(state, model)
    pretrained_at = ckpt["config"].get("img_size")
    fix = (
        f"this backbone does not move from the {pretrained_at} px it was pretrained at; leave out --img-size."
        if img_size not in (None, pretrained_at)
        else "was it written by another version, or its config edited?"
    )
    check_shapes(model, state, path, fix)
    result = model.load_state_dict(state, strict=False)
    head = classifier_prefix(model)
    missing = [k for k in result.missing_keys if not k.startswith((head + ".", f"{fresh}."))]
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"checkpoint '{path}' does not fit backbone '{ckpt['config'].get('backbone')}': missing "
            f"{missing[:4]}, unexpected {result.unexpected_keys[:4]}. Was it written by another version?"
        )
    return model


# a timm ViT's final norm: `norm` on the tokens before the class token is read, `fc_norm` after the patch mean
FINAL_NORMS = ("norm", "fc_norm")


def moved_norm(state: set, model: set) -> tuple[str, str] | None:
    """(old, new) where a ViT pooled otherwise than in pretraining keeps its final norm at `new` (`fc_norm` for avg,
    `norm` for the class token) and the checkpoint's weight names (`state`) hold it at `old`; None where nothing
    moved. `model`: the model's weight names."""
    for old, new in (FINAL_NORMS, FINAL_NORMS[::-1]):
        if f"{old}.weight" in state and f"{old}.weight" not in model and f"{new}.weight" in model:
            return old, new
    return None


def moved_final_norm(state: dict, model: nn.Module) -> str | None:
    """Drop from `state` a final norm that moved (`moved_norm`), so the model's starts afresh, as MAE's fine-tuning
    starts `fc_norm`; the name of the fresh one, or None."""
    moved = moved_norm(set(state), set(model.state_dict()))
    if moved is None:
        return None
    for key in [key for key in state if key.startswith(moved[0] + ".")]:
        del state[key]
    return moved[1]


def create_classifier(
    checkpoint: str | None,
    backbone: str | None = None,
    img_size: int | None = None,
    positions: str = LEARNED_POSITIONS,
    resize: bool = False,
    **kwargs,
) -> tuple[nn.Module, dict]:
    """A timm model (kwargs: num_classes, drop_path_rate, ...) and the pretraining config it came from.

    With a checkpoint, the backbone name is the checkpoint's and so is the image size, unless `resize` lets
    `img_size` differ (a ViT's positions resampled to it: `resample_positions`); without one, `backbone`
    is built at random (the from-scratch baseline), its ViT patch positions as `positions` says (learned,
    sincos: the fixed 2D table, still trained on, or auto: sincos on a ViT, as pretraining starts it), and the
    config is {}. Fused attention is back on: nothing downstream of pretraining needs a double backward.
    """
    if checkpoint is None:
        model = backbones.create_backbone(backbone, img_size=img_size or 32, **kwargs)
        if resolved_positions(positions, model) == SINCOS_POSITIONS:
            fix_sincos_positions(model, backbone, "--positions sincos", frozen=False)
        return set_fused_attention(model, True), {}
    if positions == SINCOS_POSITIONS:
        raise ParameterError("positions='sincos' is for a backbone from scratch; a checkpoint's are its own.")
    ckpt = load_checkpoint(checkpoint, kinds=("pretrain",))
    return classifier_from(ckpt, checkpoint, backbone, img_size, resize, **kwargs)


def classifier_from(
    ckpt: dict,
    checkpoint,
    backbone: str | None = None,
    img_size: int | None = None,
    resize: bool = False,
    **kwargs,
) -> tuple[nn.Module, dict]:
    """`create_classifier` from a pretraining checkpoint already loaded (its config read first, e.g. for its data)."""
    saved = ckpt["config"]
    if backbone is not None and backbone != saved.get("backbone"):
        raise ParameterError(
            f"checkpoint '{checkpoint}' holds a {saved.get('backbone')} backbone, not {backbone}; "
            f"leave out --backbone (it is the checkpoint's)."
        )
    if img_size is not None and img_size != saved.get("img_size") and not resize:
        raise ParameterError(
            f"checkpoint '{checkpoint}' was pretrained at {saved.get('img_size')} px; "
            f"use that size (leave out --img-size)."
        )
    if kwargs.get("global_pool") is None:  # the pooling it was pretrained with, unless another is asked
        kwargs["global_pool"] = saved.get("global_pool")
    size = img_size or saved.get("img_size")
    model = backbones.create_backbone(saved["backbone"], img_size=size, **kwargs)
    return set_fused_attention(load_pretrained(model, ckpt, checkpoint, size), True), saved


GIVEN, RECORDED, SAMPLE = "given", "recorded", "sample"


def downstream_data(data: str | None, recorded: str | None) -> tuple[str, str]:
    """(data, where it came from): `--data` when given, else the data the weights were pretrained on (the
    checkpoint's config records it), else the embedded sample (a random backbone records none)."""
    if data is not None:
        return data, GIVEN
    if recorded:
        return recorded, RECORDED
    return "sample", SAMPLE


def describe_data(data: str, origin: str) -> str:
    """How the first output line names the data: which, and why that one."""
    return {
        GIVEN: f"'{data}'",
        RECORDED: f"'{data}' (the data the weights were trained on, as the checkpoint records; --data to change)",
        SAMPLE: f"'{data}' (the embedded sample: no data recorded; --data DIR to change)",
    }[origin]


def downstream_splits(data: str, origin: str, img_size: int, seed: int, max_images: int | None = None):
    """`labelled_splits` of the data (of shards, each split's first `max_images` images); when it is the
    checkpoint's and cannot serve labels, the error says so."""
    try:
        return labelled_splits(data, img_size, seed, max_images)
    except DataError as err:
        if origin != RECORDED:
            raise
        raise DataError(
            f"--data was not given, so the checkpoint's pretraining data '{data}' was taken, but: "
            f"{str(err).rstrip('.')}. Give --data DIR with train/ and val/ class folders, or labelled shards."
        ) from None


def pretraining_record(saved: dict, keys: tuple[str, ...]) -> dict:
    """`keys` of a pretraining run's record, with task and task_args None where its method corrupts its own way
    (`uses_task` False: MAE, SimMIM, such a plugin), as --task never applied there. A plugin method not installed
    here keeps what the run recorded."""
    from pretexts.errors import UnknownNameError
    from pretexts.registry import METHODS

    record = {k: saved.get(k) for k in keys}
    try:
        ignores_task = bool(saved.get("method")) and not METHODS.get(saved["method"]).uses_task
    except UnknownNameError:
        ignores_task = False
    if ignores_task:
        record.update({k: None for k in ("task", "task_args") if k in record})
    return record
