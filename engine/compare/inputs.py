"""The probes' images, decoded and transformed once per comparison instead of once per cell: every cell probes
the same train/ and val/ images through the same deterministic evaluation transform, so the tensors are kept in
memory (up to `LIMIT_BYTES` in all; past that each cell decodes its own, as `pretexts probe` does)."""

import torch
from torch.utils.data import Dataset, Subset, TensorDataset

from pretexts.engine.data.labelled_data import LabelledImages, class_names, eval_transform
from pretexts.engine.data.streams import is_stream
from pretexts.engine.evaluation.pretrained import GIVEN, downstream_splits

LIMIT_BYTES = 2 << 30  # a few thousand images at 224 px, or CIFAR-size data many times over
_kept: dict[tuple, tuple] = {}


def probe_inputs(
    data: str, img_size: int, mean, std, crop_pct: float, seed: int, max_images: int | None = None
) -> tuple[Dataset, Dataset, list]:
    """(train, val, class names): datasets of (tensor, label) for `extract_features`; the same tensors
    `pretexts probe` would feed (the evaluation transform has no randomness), read from memory after the first
    call with these arguments. Of shards, each split's first `max_images` images (in shard order)."""
    settings = (str(data), img_size, tuple(mean), tuple(std), crop_pct)
    # shards: the same first images whatever the seed, so a kept set is found before any is read again
    key = (*settings, max_images) if is_stream(data) else None
    if key in _kept:
        return _kept[key]
    # a folder scan, no decoding; of shards, their first images decoded
    train_source, val_source = downstream_splits(data, GIVEN, img_size, seed, max_images)
    key = key or (*settings, chosen(train_source), chosen(val_source))
    if key in _kept:
        return _kept[key]
    transform = eval_transform(img_size, mean, std, crop_pct)
    train, val = LabelledImages(train_source, transform), LabelledImages(val_source, transform)
    found = (train, val, class_names(train_source))
    size = (len(train) + len(val)) * 3 * img_size * img_size * 4
    if size + sum(kept_bytes(v) for v in _kept.values()) <= LIMIT_BYTES:
        found = (decoded(train), decoded(val), found[2])
        _kept[key] = found
    return found


def chosen(source: Dataset) -> tuple | None:
    """Which images of the data a split holds: a seeded held-out split's indices (the seed matters), else None
    (train/ and val/ folders: the same images whatever the seed)."""
    return tuple(source.indices) if isinstance(source, Subset) else None


def decoded(images: LabelledImages) -> TensorDataset:
    pairs = [images[i] for i in range(len(images))]
    return TensorDataset(torch.stack([image for image, _ in pairs]), torch.tensor([label for _, label in pairs]))


def kept_bytes(entry: tuple) -> int:
    return sum(part.tensors[0].numel() * 4 for part in entry[:2])


def forget() -> None:
    """Drops the kept tensors (between comparisons in one process, e.g. the tests)."""
    _kept.clear()
