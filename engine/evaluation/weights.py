"""The backbones `pretexts probe` takes: a pretraining checkpoint, an export of `pretexts export` (a folder or one
weights file), a timm model whose pretrained weights are already on disk, or a seeded random initialisation (the
baseline). Nothing is downloaded: timm's weights are read from the Hugging Face or torch hub cache, a file, or a
`local-dir:` folder."""

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import timm
import torch
from torch import nn

from pretexts.backbones.factory import known_to_timm, plugin_failures, set_fused_attention
from pretexts.backbones.vit_tokens import LEARNED_POSITIONS, SINCOS_POSITIONS, starting_positions
from pretexts.engine.evaluation.pretrained import classifier_prefix, create_classifier
from pretexts.engine.training.checkpoint import check_shapes
from pretexts.errors import CheckpointError, ParameterError, UnknownNameError, suggest

WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
HUB_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm reads from a Hub repository, in its order
# timm.create_model's own arguments: among a model's recorded kwargs they would load another file
# (checkpoint_path), reach the Hub (pretrained, pretrained_cfg, cache_dir) or replace the recorded preprocessing
FACTORY_ARGS = ("checkpoint_path", "pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")  # timm's str_to_interp_mode names
CROP_MODES = ("center", "squash", "border")  # timm's eval transform's
EXPORT_FIX = "write it again with `pretexts export`."


@dataclass
class Weights:
    """A backbone to probe (a timm model without classifier) and what is known of where it came from."""

    model: nn.Module
    source: str  # what was loaded, in words
    backbone: str  # the alias or timm name
    img_size: int  # the input size the weights were trained at
    data: str | None = None  # the data they were trained on, where recorded
    pretraining: dict = field(default_factory=dict)

    @property
    def positions(self) -> str | None:
        """A ViT's patch positions: sincos where they are the fixed table, else learned; None without any."""
        return starting_positions(self.model)


def load_backbone(
    checkpoint: str | None,
    timm_model: str | None = None,
    backbone: str | None = None,
    img_size: int | None = None,
    seed: int = 0,
    positions: str = LEARNED_POSITIONS,
) -> Weights:
    """`timm_model` (weights from `checkpoint` when given, else from disk), else `checkpoint` (a pretraining
    checkpoint or an export), else `backbone` at random init, seeded by `seed`, its ViT patch positions as
    `positions` says (`create_classifier`)."""
    if timm_model:
        weights = timm_weights(timm_model, checkpoint)
    elif checkpoint is None:
        torch.manual_seed(seed)
        model, _ = create_classifier(None, backbone, img_size, positions, num_classes=0)
        table = " with the sin-cos position table" if starting_positions(model) == SINCOS_POSITIONS else ""
        return Weights(model, f"{backbone} at random init (seed {seed}){table}", backbone, img_size or 32)
    elif Path(checkpoint).is_dir():
        weights = export_folder(Path(checkpoint))
    elif exported_file(Path(checkpoint)):
        weights = export_file(Path(checkpoint))
    else:
        model, saved = create_classifier(checkpoint, num_classes=0)
        return Weights(
            model, f"checkpoint '{checkpoint}'", saved["backbone"], saved["img_size"], saved.get("data"), saved
        )
    set_fused_attention(weights.model, True)
    return weights


def exported_file(path: Path) -> bool:
    """A weights file `pretexts export` wrote: a .safetensors, or any weights file with its export .json beside."""
    return path.suffix == ".safetensors" or "timm_name" in read_json(path.with_suffix(".json"))


def read_json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def recorded_data(info: dict) -> str | None:
    """The data an export's weights were last trained on: the fine-tuning's, else the pretraining's."""
    return (info.get("fine_tuned") or {}).get("data") or (info.get("pretraining") or {}).get("data")


def input_size(model: nn.Module) -> int:
    return int(model.pretrained_cfg["input_size"][-1])


def export_folder(path: Path) -> Weights:
    """A folder of `pretexts export` (or any timm Hub folder): timm's `local-dir:` loader."""
    missing = [name for name in ("config.json", HUB_FILES[0]) if not (path / name).is_file()]
    if not (path / "config.json").is_file() or not any((path / name).is_file() for name in HUB_FILES):
        run = path / "checkpoint.pt"  # a training run's folder, given for the checkpoint inside it
        hint = f" Did you mean '{run}'?" if run.is_file() else ""
        raise CheckpointError(
            f"'{path}' is a folder but no export (it lacks {' and '.join(missing)}); give "
            f"a checkpoint.pt of `pretexts train`, or a folder or file written by `pretexts export`.{hint}"
        )
    model = timm_call(f"local-dir:{path}", pretrained=True, num_classes=0)
    info = read_json(path / "pretexts.json")
    return Weights(
        model,
        f"export '{path}'",
        read_json(path / "config.json").get("architecture", "?"),
        input_size(model),
        recorded_data(info),
        info.get("pretraining") or {},
    )


def export_file(path: Path) -> Weights:
    """One weights file of `pretexts export`: its .json beside names the timm model and its preprocessing."""
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint '{path}' does not exist; give an export of `pretexts export` or a "
            f"checkpoint.pt of `pretexts train`."
        )
    info = read_json(path.with_suffix(".json"))
    if "timm_name" not in info:
        raise CheckpointError(
            f"'{path}' has no {path.with_suffix('.json').name} beside it to say which timm model "
            f"it holds; give --timm-model NAME with it."
        )
    where = f"'{path.with_suffix('.json')}'"
    check_timm_spec(info["timm_name"], info.get("kwargs", {}), where)
    model = timm_call(
        info["timm_name"],
        pretrained=False,
        pretrained_cfg_overlay=recorded_preprocessing(info, where),
        **{**info.get("kwargs", {}), "num_classes": 0},
    )
    load_file(model, path)
    return Weights(
        model,
        f"export '{path}'",
        info["timm_name"],
        input_size(model),
        recorded_data(info),
        info.get("pretraining") or {},
    )


def shown(value) -> str:
    """A recorded value in a message: its repr (control characters escaped), cut short."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def check_timm_spec(
    name, kwargs, where: str, fields: tuple[str, str] = ("timm_name", "kwargs"), fix: str = EXPORT_FIX
) -> None:
    """Refuse a recorded timm name or arguments that would make timm reach past the weights given: a hub name
    (`hf-hub:...`; nothing is downloaded), or create_model's own arguments among the model's, in one line naming
    `where` they were read and the field."""
    if not isinstance(name, str) or not name or ":" in name:
        rule = "a timm model name without ':' (no hub names: nothing is downloaded)"
        raise CheckpointError(f"{where}: its {fields[0]} must be {rule}, not {shown(name)}; {fix}")
    if not isinstance(kwargs, dict) or not all(isinstance(key, str) for key in kwargs):
        rule = "a mapping of the model's argument names to values"
        raise CheckpointError(f"{where}: its {fields[1]} must be {rule}, not {shown(kwargs)}; {fix}")
    factory = [key for key in FACTORY_ARGS if key in kwargs]
    if factory:
        raise CheckpointError(
            f"{where}: its {fields[1]} may not hold {', '.join(factory)} (timm.create_model's own arguments, which "
            f"load or download other weights); {fix}"
        )


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def recorded_preprocessing(info: dict, where: str) -> dict:
    """The preprocessing an export's .json records (each field optional: older exports lack some), checked, as
    timm's `pretrained_cfg_overlay`."""
    size = info.get("input_size")
    channels = size[0] if isinstance(size, list) and size else 3
    rules = {
        "input_size": (
            "a list of 3 positive integers (channels, height, width)",
            lambda v: isinstance(v, list) and len(v) == 3 and all(is_number(n) and n == int(n) > 0 for n in v),
        ),
        "mean": (
            f"a list of {channels} numbers, one per input channel",
            lambda v: isinstance(v, list) and len(v) == channels and all(map(is_number, v)),
        ),
        "std": (
            f"a list of {channels} positive numbers, one per input channel",
            lambda v: isinstance(v, list) and len(v) == channels and all(is_number(n) and n > 0 for n in v),
        ),
        # timm's own go above 1 (volo_d4_448: 1.15): the crop is then larger than the resized image
        "crop_pct": ("a positive number", lambda v: is_number(v) and v > 0),
        "interpolation": (f"one of timm's {', '.join(INTERPOLATIONS)}", lambda v: v in INTERPOLATIONS),
        "crop_mode": (f"one of timm's {', '.join(CROP_MODES)}", lambda v: v in CROP_MODES),
    }
    overlay = {}
    for key, (rule, valid) in rules.items():
        value = info.get(key)
        if value is None:
            continue
        if not valid(value):
            raise CheckpointError(f"{where}: its {key} must be {rule}, not {shown(value)}; {EXPORT_FIX}")
        if key == "input_size":
            value = [int(n) for n in value]  # 32.0 reads as 32
        overlay[key] = tuple(value) if isinstance(value, list) else value
    return overlay


def timm_weights(name: str, file: str | None) -> Weights:
    """timm model `name` with its pretrained weights from `file`, else from the hub caches on disk."""
    if name.startswith("local-dir:"):
        if file:
            raise ParameterError("--timm-model local-dir:FOLDER holds its own weights; leave out --checkpoint.")
        return export_folder(Path(name[len("local-dir:") :]))
    if ":" in name:
        raise ParameterError(
            f"--timm-model '{name}': nothing is downloaded; give a timm name whose weights are on "
            f"disk, a weights file with --checkpoint, or local-dir:FOLDER."
        )
    if not known_to_timm(name):
        raise UnknownNameError(
            f"'{name}' is no timm model.{suggest(name.split('.')[0], timm.list_models())} "
            f"`timm.list_models('*pattern*')` lists them.{plugin_failures()}"
        )
    path = Path(file) if file else cached_weights(name)
    if path is None:
        raise CheckpointError(
            f"the pretrained weights of timm model '{name}' are not on disk, and nothing is "
            f"downloaded; give the weights file with --checkpoint FILE, or download them first "
            f"(e.g. `timm.create_model('{name}', pretrained=True)` with a network)."
        )
    if not path.is_file():
        raise CheckpointError(f"weights file '{path}' does not exist.")
    model = timm_call(name, pretrained=False, num_classes=0)
    load_file(model, path)
    return Weights(model, f"timm {name} ('{path}')", name, input_size(model))


def cached_weights(name: str) -> Path | None:
    """The file timm would download for `name`'s default pretrained weights, when it is already in the
    Hugging Face cache (hf_hub_id) or torch hub's checkpoints folder (url); None otherwise."""
    from huggingface_hub import constants, try_to_load_from_cache

    cfg = timm.models.get_pretrained_cfg(name)
    if cfg is None:
        return None
    if cfg.hf_hub_id:
        repo, _, revision = cfg.hf_hub_id.partition("@")
        for filename in (cfg.hf_hub_filename,) if cfg.hf_hub_filename else HUB_FILES:
            found = try_to_load_from_cache(repo, filename, cache_dir=constants.HF_HUB_CACHE, revision=revision or None)
            if isinstance(found, str):
                return Path(found)
    if cfg.url:
        found = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(cfg.url).path)
        if found.is_file():
            return found
    return None


def timm_call(name: str, **kwargs) -> nn.Module:
    """timm.create_model, the backbone plugins loaded where timm does not know `name` (a `local-dir:` folder's
    architecture may be a plugin's); its failures (a bad folder, arguments the model refuses, an unknown name, with
    the backbone plugins that failed to load) in one line."""
    known = known_to_timm(name)
    try:
        return timm.create_model(name, **kwargs).eval()
    except (RuntimeError, ValueError, TypeError, KeyError, OSError) as err:
        detail, failures = " ".join(str(err).split())[:200], "" if known else plugin_failures()
        detail = f"{detail.rstrip('.')}.{failures}" if failures else detail
        raise CheckpointError(f"timm cannot build '{name}': {detail}") from None


def load_file(model: nn.Module, path: Path) -> None:
    """Load a weights file (safetensors, or a torch file read with weights_only) into `model`, strict apart from
    the classifier it has none of; a mismatch in one line."""
    try:
        state = timm.models.load_state_dict(str(path))
    except Exception as err:  # a file torch or safetensors cannot read, or one holding Python objects
        raise CheckpointError(
            f"cannot read weights file '{path}' ({type(err).__name__}: {' '.join(str(err).split())[:160]})."
        ) from None
    head = classifier_prefix(model)  # 'head.fc', or a tuple where a model has two (distilled ViTs)
    heads = tuple(f"{h}." for h in ((head,) if isinstance(head, str) else head))
    own = model.state_dict()
    state = {k: v for k, v in state.items() if k in own or not k.startswith(heads)}
    fix = "is it the weights of this model?"
    check_shapes(model, state, path, fix)
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointError(
            f"weights file '{path}' does not fit {model.pretrained_cfg.get('architecture')}: "
            f"missing {result.missing_keys[:4]}, unexpected {result.unexpected_keys[:4]}; {fix}"
        )
