"""Export a pretrained or fine-tuned backbone for timm: a Hub-ready folder, or a single weights file.

A folder is what timm's `save_for_hf` writes (model.safetensors and a config.json carrying the
architecture, its arguments, input size, mean and std), so `timm.create_model("local-dir:OUT",
pretrained=True)` rebuilds the model, and `push_to_hf_hub` uploads the same files.
"""

import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save
from timm.models import push_to_hf_hub, save_for_hf

from pretexts.backbones.normalisation import normalisation
from pretexts.engine.evaluation.linear_probe_protocol import plain_classifier_state, protocol
from pretexts.engine.evaluation.pretrained import classifier_from, pretraining_record, timm_spec
from pretexts.engine.evaluation.weights import check_timm_spec, timm_call
from pretexts.engine.training.checkpoint import atomic_save, load_checkpoint, load_weights
from pretexts.engine.training.file_writes import write_json
from pretexts.engine.training.preflight import check_output_dir
from pretexts.engine.training.run_folder import RunLock, claim_output_dir, claim_output_file
from pretexts.errors import OutputError, ParameterError

WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")
# the architecture's own pretrained tag (e.g. augreg_in21k) and licence (timm's weights are mostly apache-2.0)
# would claim weights these are not: these are pretexts' own, under the project's MIT licence
LICENSE = "mit"
HUB_CONFIG = {"pretrained_cfg": {"tag": "pretexts", "license": LICENSE}}
# how finetune and probe resize and crop for evaluation (labelled_data.eval_transform); timm's architectures default
# to others (bilinear, a squash crop)
EVAL_RESIZE = {"interpolation": "bicubic", "crop_mode": "center"}
# the preprocessing a weights file's .json and load line carry, as a folder's config.json does
FILE_DATA_KEYS = ("input_size", "mean", "std", "crop_pct", "interpolation", "crop_mode")
FINETUNE_FIX = "is it a checkpoint of `pretexts finetune`?"


def hub_config(classes: list | None) -> dict:
    """timm's model_config: the tag and licence, and a classifier's class names as timm's `label_names` (the
    Hub shows them; `model.pretrained_cfg["label_names"]` after loading)."""
    return {**HUB_CONFIG, "label_names": list(classes)} if classes else HUB_CONFIG


def load_for_export(checkpoint: str) -> tuple[torch.nn.Module, str, dict, dict]:
    """(timm model in eval mode, timm name, its kwargs, where it came from) for any checkpoint pretexts writes:
    a pretraining checkpoint (the backbone, no classifier), a fine-tuning run's checkpoint.pt or finetuned.pt
    (the classifier with its head; best.pt, the best epoch's, alike)."""
    ckpt = load_checkpoint(checkpoint, kinds=("pretrain", "finetune", "finetuned"))
    if ckpt.get("kind") in ("finetune", "finetuned"):
        spec = ckpt["timm"] if isinstance(ckpt.get("timm"), dict) else {}
        where = f"checkpoint '{checkpoint}'"
        check_timm_spec(spec.get("name"), spec.get("kwargs"), where, ("timm.name", "timm.kwargs"), FINETUNE_FIX)
        model = timm_call(spec["name"], pretrained=False, **spec["kwargs"])  # loads a plugin's architecture too
        state = plain_classifier_state(ckpt["model"], model)  # a linear probe's head folded, as its finetuned.pt
        load_weights(model, state, checkpoint, spec["name"], "was it written by another version?")
        provenance = {
            "fine_tuned": {
                **{k: ckpt["config"].get(k) for k in ("checkpoint", "data", "epochs")},
                "protocol": protocol(ckpt["config"].get("linear_probe", False)),
                "epoch": ckpt.get("epoch"),
                "val_top1": ckpt.get("top1"),
                "crop_pct": ckpt["config"].get("crop_pct"),  # the crop val_top1 was scored at
                "img_size": ckpt["timm"]["img_size"],  # the size it trained at, as `finetune` resolved it
            },
            "classes": spec.get("classes"),
        }
        # checkpoint.pt, saved each epoch; finetuned.pt is written as a run ends, and best.pt's epoch is its best one
        if ckpt["kind"] == "finetune":
            note_unfinished(checkpoint, ckpt.get("epoch"), ckpt.get("global_step"), ckpt["config"].get("epochs"))
        return model.eval(), spec["name"], spec["kwargs"], provenance
    model, saved = classifier_from(ckpt, checkpoint, num_classes=0)
    timm_name, kwargs = timm_spec(saved["backbone"], saved["img_size"], model, saved.get("global_pool"))
    kwargs = {**kwargs, "num_classes": 0}
    pretraining = pretraining_record(
        saved, ("method", "method_args", "task", "task_args", "backbone", "global_pool", "img_size", "data")
    )
    # how far the run got: the epochs it finished and its optimiser steps, against the epochs it planned
    epoch, step, planned = ckpt.get("epoch"), ckpt.get("global_step"), saved.get("epochs")
    reached = {"epoch": epoch, "global_step": step, "planned_epochs": planned}
    note_unfinished(checkpoint, epoch, step, planned, ckpt.get("batch") or 0)
    return model.eval(), timm_name, kwargs, {"pretraining": {**pretraining, **reached}}


def note_unfinished(checkpoint: str, epoch, step, planned, batch: int = 0) -> None:
    """One line on stderr when the checkpoint is of a run stopped before its planned epochs: its weights are exported
    as they are, so say how far they got."""
    if epoch is None or planned is None or epoch >= planned:
        return
    within = f" and {batch} step{'s' * (batch != 1)} into epoch {epoch + 1}" if batch else ""
    print(
        f"note: {checkpoint} is of an unfinished run: {epoch} of its {planned} planned epochs done{within} "
        f"(step {step}); exporting the weights as they are.",
        file=sys.stderr,
        flush=True,
    )


def data_config(model: torch.nn.Module, img_size: int, crop_pct: float | None = None) -> dict:
    """The preprocessing the weights were trained with: the run's size, not the architecture's 224 px default, and
    a fine-tune's evaluation (`crop_pct`, and the resize and crop `eval_transform` scores with, whatever the
    architecture's own), so timm's eval transform reproduces the score recorded beside it."""
    mean, std = normalisation(model)
    return {
        "input_size": (3, img_size, img_size),
        "mean": mean,
        "std": std,
        "crop_pct": crop_pct or model.pretrained_cfg.get("crop_pct", 0.875),
        **EVAL_RESIZE,
    }


def side(size) -> int:
    return size[0] if isinstance(size, (tuple, list)) else int(size)


def model_img_size(kwargs: dict, provenance: dict) -> int:
    """The side the weights were trained at: a fine-tune's size, a pretraining's, else a ViT's kwargs' (32 px for
    a CNN that records none)."""
    record = provenance.get("fine_tuned") or provenance.get("pretraining") or {}
    return side(record.get("img_size") or kwargs.get("img_size") or 32)


def load_line(timm_name: str, kwargs: dict, target: str, data: dict) -> str:
    """The one line of Python that rebuilds the exported model with timm alone."""
    if Path(target).suffix not in WEIGHT_SUFFIXES:
        return f"timm.create_model({'local-dir:' + target!r}, pretrained=True)"
    overlay = {
        "file": target,
        "num_classes": kwargs.get("num_classes", 0),
        **{key: data[key] for key in FILE_DATA_KEYS},
        # the architecture's test-time size and crop would replace the run's under timm's `use_test_size` (its
        # validate.py's default); a folder's config.json drops them too
        "test_input_size": None,
        "test_crop_pct": None,
    }
    args = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return f"timm.create_model({timm_name!r}, pretrained=True, pretrained_cfg_overlay={overlay!r}{args})"


def export_backbone(
    checkpoint: str, out: str, push_to_hub: str | None = None, private: bool = False, force: bool = False
) -> dict:
    """Export `checkpoint` to `out`: a folder (Hub-ready, the default) or a weights file (.safetensors, .pth).

    Writes `pretexts.json` in the folder (OUT with suffix .json for a file): the timm name, arguments, load
    line and provenance. With `push_to_hub`, uploads the folder's files to that Hub repository (timm's
    `push_to_hf_hub`; needs a Hub login, `hf auth login` (`huggingface-cli login` before huggingface_hub 0.34), or
    HF_TOKEN; a repository id the Hub would refuse is refused before anything is written). An existing export or
    run is replaced only with `force`, and the checkpoint never.

    Args:
        checkpoint: A checkpoint of `pretexts train` (the backbone alone) or of `pretexts finetune` (checkpoint.pt,
            finetuned.pt or best.pt: the classifier with its head).
        out: A folder, or a file ending in .safetensors, .pth, .pt or .bin.
        push_to_hub: A Hub repository id, USER/REPO; None: no upload.
        private: Create the Hub repository private.
        force: Replace an existing export or run folder at `out`.

    Returns:
        What `pretexts.json` holds (OUT with suffix .json for a file):

            - `file` (`out`), `timm_name` and `kwargs` (what `timm.create_model` takes; `num_classes` 0 for a
              backbone), `tensors`, `parameters`, `input_size`, `mean`, `std`, `crop_pct`, `interpolation` and
              `crop_mode` (the preprocessing the weights were trained and evaluated with), `license`, `load` (the
              line of Python that rebuilds the model with timm alone) and `checkpoint`;
            - of a pretraining checkpoint, `pretraining`: its `method`, `method_args`, `task`, `task_args`,
              `backbone`, `global_pool`, `img_size`, `data`, and how far it got (`epoch`, `global_step`,
              `planned_epochs`);
            - of a fine-tuning one, `fine_tuned` (its `checkpoint`, `data`, `epochs`, `protocol`: a fine-tune or
              MAE's linear probe, as results.json says, the `epoch` saved and its `val_top1`, `crop_pct` and
              `img_size`, the size it trained at) and `classes` (the class names, in label order);
            - with `push_to_hub`, `hub`: the upload's URL (returned only: `pretexts.json` is written before).

    Raises:
        OutputError: `out` holds an export or a run (without `force`) or the checkpoint, cannot be written, or the
            upload failed (the local export is complete by then).
        CheckpointError: `checkpoint` is missing, damaged or of another kind.
        ParameterError: `push_to_hub` is no repository id the Hub accepts.
    """
    if push_to_hub is not None:
        check_repo_id(push_to_hub)  # before anything is written: a bad id cannot be pushed later either
    path = Path(out)
    if path.suffix in WEIGHT_SUFFIXES:
        claim_output_file(path, force, inputs=[checkpoint], companions=[path.with_suffix(".json")])
        return export_to(checkpoint, path, push_to_hub, private)
    with RunLock(path, "export"):
        claim_output_dir(path, None, force, inputs=[checkpoint], resumable=False)
        return export_to(checkpoint, path, push_to_hub, private)


def export_to(checkpoint: str, path: Path, push_to_hub: str | None, private: bool) -> dict:
    model, timm_name, kwargs, provenance = load_for_export(checkpoint)
    crop_pct = provenance.get("fine_tuned", {}).get("crop_pct")
    data = data_config(model, model_img_size(kwargs, provenance), crop_pct)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    is_file = path.suffix in WEIGHT_SUFFIXES
    check_output_dir(path.parent if is_file else path, sum(t.numel() * t.element_size() for t in state.values()))
    if is_file:
        if path.suffix == ".safetensors":
            atomic_save(state, path, lambda tensors, fh: fh.write(save(tensors, metadata={"timm_name": timm_name})))
        else:
            atomic_save(state, path)
    else:
        write_folder(model, path, kwargs, data, provenance.get("classes"))
    info = {
        "file": str(path),
        "timm_name": timm_name,
        "kwargs": kwargs,
        "tensors": len(state),
        "parameters": sum(p.numel() for p in model.parameters()),
        **{key: list(data[key]) if isinstance(data[key], tuple) else data[key] for key in FILE_DATA_KEYS},
        "license": LICENSE,
        "load": load_line(timm_name, kwargs, str(path), data),
        "checkpoint": str(checkpoint),
        **provenance,
    }
    write_json(path.with_suffix(".json") if is_file else path / "pretexts.json", info)
    if push_to_hub:
        try:
            info["hub"] = str(
                push_to_hf_hub(
                    model,
                    push_to_hub,
                    model_config=hub_config(provenance.get("classes")),
                    model_card={"license": LICENSE},
                    model_args=kwargs,
                    data_config=data,
                    private=private,
                    commit_message=f"pretexts export of {Path(checkpoint).name}",
                    safe_serialization=True,
                )
            )
        except Exception as err:  # auth, network, the Hub's refusal: the local export is already complete
            raise OutputError(upload_failed(err, path, push_to_hub, private)) from err
    return info


def check_repo_id(repo: str) -> None:
    """Refuse a repository id the Hub would refuse (huggingface_hub's own rule), naming what is wrong with it."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as err:  # its words name the rule broken
        raise ParameterError(
            f"push_to_hub must be a Hub repository id, USER/REPO (or REPO, under your own name), got {repo!r}: "
            f"{' '.join(str(err).split())}"
        ) from None


def hub_command() -> str:
    """The Hub's command line: `hf` from huggingface_hub 0.34 on (1.0 removed `huggingface-cli`)."""
    from huggingface_hub import __version__

    major, minor = (int(part) for part in re.findall(r"\d+", __version__)[:2])
    return "hf" if (major, minor) >= (0, 34) else "huggingface-cli"


def login_command() -> str:
    """The installed huggingface_hub's login command, quoted: `hf auth login` or `huggingface-cli login`."""
    cli = hub_command()
    return f"`{cli} auth login`" if cli == "hf" else f"`{cli} login`"


# the transport errors of httpx, requests and the socket layer: the Hub was never reached
UNREACHED = {"ConnectError", "ConnectTimeout", "NetworkError", "TimeoutException", "ProxyError", "gaierror"}


def upload_advice(err: BaseException, repo: str) -> str:
    """What to fix, by the kind of failure: offline mode, no network, the login, the namespace, the Hub itself; ""
    for another (its own message says it)."""
    kinds = {cls.__name__ for cls in type(err).__mro__}
    status = getattr(getattr(err, "response", None), "status_code", None)
    login = login_command()
    owner = repo.split("/")[0] if "/" in repo else "your own name"
    if "OfflineModeIsEnabled" in kinds:
        return "HF_HUB_OFFLINE is set, which forbids uploads: unset it"
    if status == 401 or "LocalTokenNotFoundError" in kinds:
        return f"the Hub did not accept the login: log in with {login} or set HF_TOKEN"
    if status == 403:
        return (
            f"the token may not create or write repositories under {owner}: use one with write access there "
            f"({login} or HF_TOKEN)"
        )
    if status == 404:
        return f"the Hub found no user or organisation {owner} the token may write to: check the name before the '/'"
    if status is not None and status >= 500:
        return "the Hub failed to answer: try again later"
    if kinds & UNREACHED or isinstance(err, (ConnectionError, TimeoutError)):
        return "the Hub could not be reached (no network, or huggingface.co did not resolve): check the connection"
    return ""


def upload_failed(err: BaseException, path: Path, repo: str, private: bool) -> str:
    """The one line of a failed upload: the export that was written, why the upload failed, what to fix, and how to
    push it without exporting again (the folder as it is) or by exporting again (--force: OUT exists now)."""
    cause = " ".join(str(err).split())[:200]
    flag = " --private" if private else ""
    out = shlex.quote(str(path))
    again = f"export again with --force (force=True in Python; --out {out} exists now)"
    if path.suffix not in WEIGHT_SUFFIXES:  # a folder is Hub-ready as written
        again = f"push the folder as written: `{hub_command()} upload {repo} {out}{flag}`, or {again}"
    advice = upload_advice(err, repo)
    return (
        f"wrote {path}, but the upload to '{repo}' failed ({type(err).__name__}: {cause}); "
        f"{f'{advice}, then' if advice else 'once that is fixed,'} {again}."
    )


def write_folder(model: torch.nn.Module, path: Path, kwargs: dict, data: dict, classes: list | None = None) -> None:
    """timm's `save_for_hf` into a temporary sibling, then moved into place: a failed export leaves no half folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        save_for_hf(
            model,
            str(staging),
            model_config=hub_config(classes),
            model_args=kwargs,
            data_config=data,
            safe_serialization=True,
        )
        path.mkdir(exist_ok=True)
        for item in staging.iterdir():
            item.replace(path / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
