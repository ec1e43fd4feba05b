"""Frozen-feature evaluation: linear probe, the paper's MLP head, and kNN, on features extracted once.

A probe is a function `(train, val, num_classes, cfg, **params) -> (results, line)` on cached features, registered
with `@register_probe(name, params)` (or through the entry-point group `pretexts.probes`); `--probe NAME` runs it.
`params` declares its options as tasks and methods do (name -> `pretexts.Param`); they reach it as keyword
arguments, converted and checked, from `--probe-arg KEY=VALUE` (the built-ins' also from their own flags)."""

import dataclasses
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
from timm.scheduler import CosineLRScheduler
from torch import Tensor, nn
from torch.utils.data import DataLoader

from pretexts.backbones.normalisation import normalisation
from pretexts.backbones.vit_tokens import LEARNED_POSITIONS
from pretexts.engine.data.image_check import list_decode_failures, report_skipped
from pretexts.engine.data.labelled_data import (
    LabelledImages,
    class_names,
    describe_sizes,
    eval_transform,
    split_sizes,
)
from pretexts.engine.evaluation.pretrained import describe_data, downstream_data, downstream_splits
from pretexts.engine.evaluation.probe_config import HEAD_PARAMS, KNN_PARAMS, MLP_PARAMS, ProbeConfig
from pretexts.engine.evaluation.weights import load_backbone
from pretexts.engine.measures.health import standardise
from pretexts.engine.measures.knn import knn_accuracy
from pretexts.engine.measures.reference import Reference, random_init_note
from pretexts.engine.modules.features import BlockFeatures
from pretexts.engine.training import distributed
from pretexts.engine.training.caller_state import keeps_caller_state
from pretexts.engine.training.config_record import note_resolved, saved_settings
from pretexts.engine.training.file_writes import write_json, write_text
from pretexts.engine.training.preflight import check_backbone_fits, check_output_dir, resolve_device
from pretexts.engine.training.progress import progress
from pretexts.engine.training.run_folder import RunLock, claim_output_dir
from pretexts.engine.training.settings import expect_config
from pretexts.errors import PretextsError
from pretexts.registry import PROBES


def register_probe(name: str, params: dict | None = None):
    """Decorator: registers a probe under `name` with the parameters it takes (name -> `pretexts.Param`).

    A probe is a function `probe(train, val, num_classes, cfg, **params) -> (results, line)` on the features
    `pretexts probe` extracts once: `train` and `val` are `(features, labels)` pairs and `cfg` is the run's
    `ProbeConfig`; `results` (a dict JSON can hold) is stored under the probe's name in results.json and `line`
    is printed. The first paragraph of its docstring is its summary in `pretexts list --probes`. A plugin package
    also exposes it under the entry-point group `pretexts.probes`.

    Args:
        name: The probe's name: `pretexts probe --probe NAME`, `ProbeConfig(probes=(NAME,))`.
        params: Its options, name -> `pretexts.Param`. Each reaches the probe as a keyword argument, converted and
            checked, from `--probe-arg KEY=VALUE` (`ProbeConfig.probe_args`), else its default.

    Returns:
        (Callable): The decorator, which returns the probe with `params` set on it.

    Raises:
        DuplicateNameError: Another probe has the name (a new definition of the same function, a re-run cell,
            replaces it with a warning).

    Shape:
        - train, val: features `(N, D)` float, labels `(N,)` int64 in [0, num_classes).

    Examples:
        >>> import torch
        >>> from pretexts import Param
        >>> from pretexts.engine.evaluation.probe import register_probe
        >>> @register_probe("centroid", {"scale": Param(1.0, float, 1e-6, 1e6)})
        ... def centroid(train, val, num_classes, cfg, *, scale):
        ...     '''Nearest class mean of the features.'''
        ...     means = torch.stack([train[0][train[1] == c].mean(0) for c in range(num_classes)])
        ...     guess = torch.cdist(val[0] * scale, means * scale).argmin(1)
        ...     top1 = 100.0 * (guess == val[1]).float().mean().item()
        ...     return {"top1": top1}, f"centroid: {top1:.1f}% top-1"
        >>> features = torch.tensor([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
        >>> labels = torch.tensor([0, 0, 1, 1])
        >>> centroid((features, labels), (features, labels), 2, None, scale=1.0)
        ({'top1': 100.0}, 'centroid: 100.0% top-1')
        >>> centroid.params["scale"].default
        1.0
    """

    def wrap(probe):
        probe.params = dict(params or {})
        return PROBES.register(name)(probe)

    return wrap


def probe_head(method: str, dim: int, num_classes: int, hidden: int = 768) -> nn.Module:
    """A BatchNorm without affine (MAE's linear probe) then a linear layer, or the paper's 3-layer MLP."""
    if method == "linear":
        return nn.Sequential(nn.BatchNorm1d(dim, affine=False), nn.Linear(dim, num_classes))
    return nn.Sequential(
        nn.BatchNorm1d(dim, affine=False),
        nn.Linear(dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


@torch.no_grad()
def extract_features(
    model: nn.Module,
    dataset,
    device,
    batch_size: int = 256,
    workers: int = 2,
    desc: str = "features",
    quiet: bool = True,
    rank: int = 0,
    world: int = 1,
) -> tuple[Tensor, Tensor]:
    """Pooled features [N, D] and labels [N] of a dataset through a frozen model, in eval mode. Under torchrun each
    rank extracts its shard and every rank gets the whole set back, in the dataset's order."""
    model.eval()
    features, labels = [], []
    loader = DataLoader(distributed.shard(dataset, rank, world), batch_size=batch_size, num_workers=workers)
    with progress(len(loader), desc, quiet, enabled=rank == 0) as bar:
        for images, target in loader:
            features.append(model(images.to(device)).float().cpu())
            labels.append(target)
            bar.update()
    features = torch.cat(features) if features else torch.empty((0, 0), dtype=torch.float32)
    labels = torch.cat(labels) if labels else torch.empty(0, dtype=torch.long)
    if world > 1:  # a rank whose share is empty (fewer images than ranks) sends rows of the others' width
        width = torch.tensor(features.shape[1], device=device)
        dist.all_reduce(width, op=dist.ReduceOp.MAX)
        features = features.reshape(features.shape[0], int(width))
    return distributed.gather_shards(features, device, world), distributed.gather_shards(labels, device, world)


def train_head(
    head: nn.Module,
    train: tuple[Tensor, Tensor],
    val: tuple[Tensor, Tensor],
    seed: int,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    weight_decay: float,
) -> float:
    """AdamW with cosine decay on cached features; returns the final val top-1 in percent."""
    generator = torch.Generator().manual_seed(seed)
    features, labels = train
    steps = -(-features.shape[0] // batch_size)
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay)
    # at least 2: timm warns that a one-step cosine does nothing (the one step's lr is the peak either way)
    scheduler = CosineLRScheduler(optimizer, t_initial=max(epochs * steps, 2), t_in_epochs=False)
    head.train()
    for epoch in range(epochs):
        order = torch.randperm(features.shape[0], generator=generator)
        for i, start in enumerate(range(0, features.shape[0], batch_size)):
            batch = order[start : start + batch_size]
            if batch.numel() < 2:  # BatchNorm needs two samples
                continue
            loss = nn.functional.cross_entropy(head(features[batch]), labels[batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step_update(epoch * steps + i + 1)
    head.eval()
    with torch.no_grad():
        correct = (head(val[0]).argmax(1) == val[1]).sum().item()
    return 100.0 * correct / max(val[1].numel(), 1)  # in float64: 8 of 50 reads 16.0, not 15.999999642


@keeps_caller_state
def run_probe(cfg: ProbeConfig, echo: Callable[[str], None] = print) -> dict:
    """Extract features once, then evaluate every probe in `cfg.probes`; writes OUT/results.json. OUT is locked and
    claimed first: never over another run's results or the checkpoint probed.

    Args:
        cfg: The run's settings (`pretexts probe`'s options).
        echo: Where each line goes (`print` by default; `lambda line: None` silences them).

    Returns:
        The results, also OUT/results.json (under torchrun every rank returns the same; rank 0 writes):

            - `checkpoint`, `source` (the weights probed, in words), `backbone`, `block` (None: the pooled
              features), `data`, `data_origin` ("given", "recorded": the checkpoint's, or "sample"), `img_size`,
              `feature_dim`, `train_images`, `val_images`, `images` (the images of each split read, and `of` how
              many it holds: fewer only of shards), `classes`, `feature_seconds`, `processes` and `accuracy_unit`
              ("percent");
            - one entry per probe, under its name: `linear` and `mlp` give `top1` and `epochs`; `knn` and `knn-std`
              a top-1 per k (`"k=20"`, ...), `temperature` and `bank` (the training images that vote; a k above it
              votes with all of them, which the line says); a plugin probe, the dict it returns;
            - `reference`: the val set's `val_images`, `classes`, `chance_top1` and `chance_rule`, the Wilson 95 %
              interval of each probe's top-1 entries (`ci95`: probe -> entry -> `[low, high]`; `interval` says how
              it is computed) and `random_init` (how to measure the random-init reference).

    Raises:
        PretextsError: A probe failed; the others' results are written all the same, the failed one's entry
            holding `{"failed": "ErrorType: message"}`, and the error's cause is the first failure.
    """
    expect_config(cfg, ProbeConfig)
    rank, world, device = distributed.setup(resolve_device(cfg.device))
    with RunLock(cfg.out, "probe") if rank == 0 else nullcontext():  # rank 0 alone writes
        local = cfg.timm_model[len("local-dir:") :] if (cfg.timm_model or "").startswith("local-dir:") else None
        if rank == 0:
            claim_output_dir(cfg.out, None, cfg.force, inputs=[cfg.checkpoint, cfg.data, local], resumable=False)
        return probe_features(cfg, echo if rank == 0 else lambda line: None, rank, world, device)


def probe_features(
    cfg: ProbeConfig,
    echo: Callable[[str], None] = print,
    rank: int = 0,
    world: int = 1,
    device: torch.device | None = None,
) -> dict:
    """The first line names the backbone and the data (`cfg.data`, else the data the weights were trained on),
    then each probe's line; config.json records the data used. Under torchrun the ranks share the feature
    extraction, then every rank runs the probes on the whole gathered set (the same numbers everywhere, so no rank
    idles at the final barrier past a collective timeout while rank 0 trains a head) and rank 0 alone writes."""
    device = device or resolve_device(cfg.device)
    # the run's record is this copy, resolved below (the caller's config is left as given, to run again); what auto
    # and a missing --data resolve to is noted as derived in config.json
    asked, cfg = cfg, dataclasses.replace(cfg)
    weights = load_backbone(cfg.checkpoint, cfg.timm_model, cfg.backbone, cfg.img_size, cfg.seed, cfg.positions)
    if cfg.from_scratch:  # config.json records what auto resolved to
        cfg.positions = weights.positions or LEARNED_POSITIONS
    backbone = weights.model.to(device)
    if cfg.block is not None:
        backbone = BlockFeatures(backbone, cfg.block, weights.backbone)
    check_backbone_fits(backbone, weights.backbone, weights.img_size, device)  # one line, not a traceback mid-run
    check_output_dir(Path(cfg.out), 1 << 20)  # before the features are extracted, not after
    cfg.data, origin = downstream_data(cfg.data, weights.data)
    train_source, val_source = downstream_splits(cfg.data, origin, weights.img_size, cfg.seed, cfg.max_images)
    classes = class_names(train_source)
    sizes = split_sizes(train_source, val_source)  # of shards, the first --max-images of each split
    read = "" if cfg.block is None else f", block {cfg.block} of {backbone.blocks},"
    echo(
        f"probing {weights.source}{read} on {describe_data(cfg.data, origin)}: {describe_sizes(sizes)}, "
        f"{len(classes)} classes, {weights.img_size} px"
    )
    if rank == 0:  # as train does: OUT/skipped_images.txt and one note; no random crop, so no small-image count
        note = report_skipped([train_source, val_source], Path(cfg.out), write_text, small=False)
        if note:
            print(note, file=sys.stderr, flush=True)
    transform = eval_transform(weights.img_size, *normalisation(weights.model), cfg.crop_pct)
    torch.manual_seed(cfg.seed)
    start = time.time()
    shared = dict(workers=cfg.workers, quiet=cfg.quiet, rank=rank, world=world)
    images = LabelledImages(train_source, transform), LabelledImages(val_source, transform)
    train = extract_features(backbone, images[0], device, desc="train features", **shared)
    val = extract_features(backbone, images[1], device, desc="val features", **shared)
    if rank == 0:  # the files that failed only when decoded join the scan's list
        list_decode_failures(images, Path(cfg.out), write_text)
    results = {
        "checkpoint": cfg.checkpoint,
        "source": weights.source,
        "backbone": weights.backbone,
        "block": cfg.block,
        "data": cfg.data,
        "data_origin": origin,
        "img_size": weights.img_size,
        "feature_dim": train[0].shape[1],
        "train_images": train[0].shape[0],
        "val_images": val[0].shape[0],
        "images": sizes,
        "classes": len(classes),
        "feature_seconds": time.time() - start,
        "processes": world,
        "accuracy_unit": "percent",
    }
    echo(f"features: {train[0].shape[0]} train, {val[0].shape[0]} val images, {train[0].shape[1]} dims")
    failed = {}  # name -> its error: one probe's bug must not cost the others' finished results
    for name in cfg.probes:
        try:
            results[name], line = PROBES.get(name)(train, val, len(classes), cfg, **cfg.probe_params(name))
        except Exception as err:  # noqa: BLE001 - a plugin's bug included: reported, then the rest run
            failed[name] = err
            results[name] = {"failed": f"{type(err).__name__}: {' '.join(str(err).split())}"}
            line = f"{name} probe failed: {results[name]['failed']}"
        echo(line)
    results["reference"] = with_intervals(reference_of(val, len(classes)), {name: results[name] for name in cfg.probes})
    random_init = random_init_note(
        "probe", cfg.from_scratch, weights.backbone, cfg.data, weights.img_size, weights.positions
    )
    results["reference"]["random_init"] = random_init
    echo(random_init)
    if rank == 0:
        note_resolved(cfg, asked)
        write_json(Path(cfg.out) / "config.json", saved_settings(cfg))
        write_json(Path(cfg.out) / "results.json", results)
    if failed:
        raise probes_failed(failed, Path(cfg.out) / "results.json")
    return results


def probes_failed(failed: dict, written: Path) -> PretextsError:
    """The error a run with failed probes ends on, once its results are written; its cause is the first failure,
    whose traceback `--debug` shows."""
    err = PretextsError(
        f"probe{'s' * (len(failed) > 1)} {', '.join(failed)} failed (marked so in {written}, beside the other "
        f"probes' results); `pretexts --debug probe ...` shows the traceback."
    )
    err.__cause__ = next(iter(failed.values()))
    return err


def reference_of(val: tuple, num_classes: int) -> Reference:
    """What a probe's top-1 is measured on and against (val images, classes, chance level), for its line."""
    return Reference.of(val[1].tolist(), num_classes)


def with_intervals(reference: Reference, scored: dict) -> dict:
    """results.json's "reference": the val set's size and chance level, and the Wilson 95 % interval of each
    probe's top-1 entries ('top1', kNN's 'k=N'), as "ci95": {probe: {entry: [low, high]}} in percent."""
    intervals = {
        name: {
            key: list(reference.interval(value))
            for key, value in results.items()
            if (key == "top1" or key.startswith("k="))
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        }
        for name, results in scored.items()
        if isinstance(results, dict)
    }
    return {**reference.to_dict(), "ci95": {name: found for name, found in intervals.items() if found}}


@register_probe("linear", HEAD_PARAMS)
def linear_probe(train: tuple, val: tuple, num_classes: int, cfg: ProbeConfig, **head) -> tuple[dict, str]:
    """BatchNorm without affine, then a linear layer (MAE's linear probe)."""
    return head_probe("linear", train, val, num_classes, cfg, head)


@register_probe("mlp", MLP_PARAMS)
def mlp_probe(train: tuple, val: tuple, num_classes: int, cfg: ProbeConfig, *, hidden: int, **head) -> tuple[dict, str]:
    """The paper's 3-layer MLP head (768 channels, ReLU; Appendix, Table B)."""
    return head_probe("mlp", train, val, num_classes, cfg, head, hidden=hidden)


def head_probe(
    kind: str, train: tuple, val: tuple, num_classes: int, cfg: ProbeConfig, options: dict, **shape
) -> tuple[dict, str]:
    """A seeded `probe_head` of `kind` (and `shape`), trained by `train_head` with `options`; its top-1."""
    torch.manual_seed(cfg.seed)
    top1 = train_head(probe_head(kind, train[0].shape[1], num_classes, **shape), train, val, cfg.seed, **options)
    return {"top1": top1, "epochs": options["epochs"]}, (
        f"{kind} probe top-1: {reference_of(val, num_classes).score(top1)}"
    )


@register_probe("knn", KNN_PARAMS)
def knn_probe(
    train: tuple, val: tuple, num_classes: int, cfg: ProbeConfig, *, knn_k: tuple, knn_temperature: float
) -> tuple[dict, str]:
    """Cosine kNN, votes weighted exp(similarity / T), for each k in `knn_k`."""
    results = {f"k={k}": knn_accuracy(*train, *val, num_classes, k, knn_temperature) for k in knn_k}
    line = "kNN top-1: " + reference_of(val, num_classes).scores(results) + capped(knn_k, len(train[1]))
    return {**results, "temperature": knn_temperature, "bank": len(train[1])}, line


@register_probe("knn-std", KNN_PARAMS)
def standardised_knn_probe(
    train: tuple, val: tuple, num_classes: int, cfg: ProbeConfig, *, knn_k: tuple, knn_temperature: float
) -> tuple[dict, str]:
    """The same kNN on features standardised per dimension with the training set's statistics: one dominant
    direction (a brightness shortcut) no longer drowns the rest, so the gap to `knn` measures it."""
    bank, query = standardise(train[0], val[0])
    results = {f"k={k}": knn_accuracy(bank, train[1], query, val[1], num_classes, k, knn_temperature) for k in knn_k}
    line = "kNN top-1 on standardised features: " + reference_of(val, num_classes).scores(results)
    return {**results, "temperature": knn_temperature, "bank": len(train[1])}, line + capped(knn_k, len(train[1]))


def capped(knn_k: tuple, bank: int) -> str:
    """The note for a k above the training images' count, which votes with all of them."""
    over = [f"k={k}" for k in knn_k if k > bank]
    return f" ({', '.join(over)}: all {bank} training images vote)" if over else ""
