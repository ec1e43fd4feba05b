"""Labelled images for fine-tuning and probing: timm transforms, class names, class-balanced subsets."""

import random
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from unicodedata import normalize

import numpy as np
import torch
from timm.data import create_transform
from torch.utils.data import Dataset, Subset
from torchvision.datasets import DatasetFolder

from pretexts.engine.data.datasets import FlatImageFolder, build_source
from pretexts.engine.data.image_check import read_or_substitute
from pretexts.engine.data.loader import image_seed
from pretexts.engine.data.warn_once import WarnOnce
from pretexts.errors import DataError


def missing_split(data: str, split: str) -> DataError:
    """The refusal of labelled data without its `split` (probes and fine-tunes score on val): of shards, in their
    own format's words; of a folder, its missing val/."""
    from pretexts.engine.data.stream_inputs import SPLIT_WORDS, missing_split_advice
    from pretexts.engine.data.streams import is_stream

    if is_stream(data):
        return DataError(
            f"shards '{data}' hold no {SPLIT_WORDS[split]} split; accuracy is measured on val: "
            f"{missing_split_advice(data, split)}."
        )
    return DataError(
        f"data '{data}' has train/ but no val/ folder; accuracy is measured on val/. Add a val/ ImageFolder tree "
        f"beside train/."
    )


def labelled_splits(data: str, img_size: int, seed: int = 0, max_images: int | None = None) -> tuple[Dataset, Dataset]:
    """(train, val) sources of (PIL image, label); val is required, accuracy is measured on it: a folder of class
    folders without val/ holds out 5 % of each class, the same whatever `seed` (`held_out_split`, which notes it in
    the val split's scan for the run's start, as its unreadable files are). Of streamed shards,
    the first `max_images` images of each split (None: `HEAD_IMAGES`); folders are read whole. A folder's
    unreadable files are left out and kept in its scan: probe and fine-tune report them in their run folder
    (`image_check.report_skipped`), so `compare`, which reads the data for every cell, prints nothing here."""
    from pretexts.engine.data.streams import is_stream

    train = build_source(data, "train", img_size, seed, labelled=True, max_images=max_images)
    val = build_source(data, "val", img_size, seed, labelled=True, max_images=max_images)
    streamed = is_stream(data)
    if train is None and streamed:
        raise missing_split(data, "train")
    if val is None:
        raise missing_split(data, "val")
    if streamed and len(set(train.targets)) < 2:  # a probe of one class measures nothing
        raise DataError(
            f"the first {len(train)} training images of shards '{data}' all have one label; labels need a .cls "
            f"member per sample (`pretexts shard` of class folders) or a parquet label column, and more than one "
            f"class among the first --max-images."
        )
    if streamed:
        name_classes(train, val)
    else:
        match_folder_classes(data, train, val)
    return train, val


def match_folder_classes(data: str, train, val) -> None:
    """Of class folders: DataError for one class (accuracy over one class measures nothing), or for a val/ class
    train/ lacks; val/'s labels become train/'s index of the same name (`match_val_classes`)."""
    folder = train.dataset if isinstance(train, Subset) else train
    if not isinstance(folder, DatasetFolder):
        return
    if len(folder.classes) < 2:
        raise DataError(
            f"data '{data}' holds one class ('{folder.classes[0]}'); a probe or fine-tune needs at least 2 classes: "
            f"add class folders beside '{Path(folder.root) / folder.classes[0]}'."
        )
    match_val_classes(train, val)


def match_val_classes(train, val) -> None:
    """val/'s labels numbered by train/'s class folder of the same name, as probes, fine-tunes and pretraining's kNN
    monitor score them (ImageFolder numbers each split's own sorted folders, so a val/ that leaves out a class of
    train/ would shift every label after it); names match whatever their Unicode normalisation (macOS writes NFD),
    train/'s spelling kept. DataError for a val/ class train/ lacks. Either split may come
    wrapped (Subset, a dataset's `source`); a held-out share of train's own folder, or a folder without class
    folders, is left as it is."""
    folder, val = image_folder_of(train), image_folder_of(val)
    if not isinstance(val, DatasetFolder) or val is folder or FlatImageFolder in (type(folder), type(val)):
        return
    index_of = {normalize("NFC", name): index for name, index in folder.class_to_idx.items()}
    only_val = [name for name in val.classes if normalize("NFC", name) not in index_of]
    if only_val:
        in_val = {normalize("NFC", name) for name in val.classes}
        only_train = [name for name in folder.classes if normalize("NFC", name) not in in_val]
        alone = f"; only in train/: {listed(only_train)}" if only_train else ""
        raise DataError(
            f"class folders of '{val.root}' and '{folder.root}' differ: only in val/: {listed(only_val)}{alone}. "
            f"Labels are matched by class folder name: give val/ the same class folders as train/ (val/ may leave "
            f"some out)."
        )
    index = [index_of[normalize("NFC", name)] for name in val.classes]
    val.samples = val.imgs = [(path, index[label]) for path, label in val.samples]
    val.targets = [label for _, label in val.samples]
    val.classes, val.class_to_idx = list(folder.classes), dict(folder.class_to_idx)


def image_folder_of(dataset):
    """The dataset under Subset and `source` wrappers (AugmentedImages, LabelledImages)."""
    while isinstance(dataset, Subset) or isinstance(getattr(dataset, "source", None), Dataset):
        dataset = dataset.dataset if isinstance(dataset, Subset) else dataset.source
    return dataset


def listed(names: list[str], most: int = 10) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def name_classes(train, val) -> None:
    """Shards without class names (no manifest) name each label by its number, '0' to the largest label of both
    splits' first images: the training head alone could miss a class (and a label past its names breaks the
    probes' one-hot votes)."""
    if not train.classes:
        train.classes = val.classes = [str(i) for i in range(max([*train.targets, *val.targets]) + 1)]


def split_sizes(train: Dataset, val: Dataset) -> dict:
    """How many images of each split a command read and of how many: {"train": n, "val": n, "of": {"train": N,
    "val": N}}; n < N only for streamed shards (a `StreamHead` knows its split's `total`), whose first n were read."""
    read = {"train": len(train), "val": len(val)}
    return {
        **read,
        "of": {split: getattr(source, "total", n) for (split, n), source in zip(read.items(), (train, val))},
    }


def describe_sizes(sizes: dict) -> str:
    """'20 train, 10 val images', with ' (the first 20 of 320 train, 10 of 80 val images in shard order:
    --max-images)' where fewer than a split holds were read."""
    line = f"{sizes['train']} train, {sizes['val']} val images"
    of = sizes["of"]
    if all(sizes[split] == of[split] for split in of):
        return line
    parts = ", ".join(f"{sizes[split]} of {of[split]} {split}" for split in of)
    return f"{line} (the first {parts} images in shard order: --max-images)"


def labels_of(source: Dataset) -> list[int]:
    """Every image's label, read from the dataset's index where it has one (no image is decoded)."""
    if isinstance(source, Subset):
        parent = labels_of(source.dataset)
        return [parent[i] for i in source.indices]
    targets = getattr(source, "targets", None)
    if targets is not None:
        return [int(t) for t in targets]
    return [int(source[i][1]) for i in range(len(source))]


def class_names(source: Dataset) -> list[str]:
    while isinstance(source, Subset):
        source = source.dataset
    if getattr(source, "classes", None):
        return list(source.classes)
    if getattr(source, "num_classes", None):
        return [str(i) for i in range(source.num_classes)]
    return [str(i) for i in range(max(labels_of(source)) + 1)]


def class_balanced_subset(labels: list[int], fraction: float, seed: int = 0) -> list[int]:
    """Indices of a seeded `fraction` of each class (at least one image per class), sorted.

    The paper's 1 % and 10 % semi-supervised rows (Appendix, Table B) follow SimCLR's class-balanced subsets.
    """
    by_class: dict[int, list[int]] = defaultdict(list)
    for index, label in enumerate(labels):
        by_class[label].append(index)
    generator = torch.Generator().manual_seed(seed)
    chosen = []
    for label in sorted(by_class):
        members = by_class[label]
        keep = max(1, round(fraction * len(members)))
        order = torch.randperm(len(members), generator=generator)[:keep]
        chosen.extend(members[i] for i in order.tolist())
    return sorted(chosen)


@contextmanager
def seeded_randomness(seed: int):
    """Python's, numpy's and torch's global generators seeded by `seed` inside, as they were after: timm's and
    torchvision's transforms draw from all three."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)


class LabelledImages(Dataset):
    """(PIL, label) -> (transformed tensor, label), optionally over a subset of indices.

    Given (epoch, i) keys (an `EpochSampler`'s), the transform's randomness is seeded by (seed, epoch, i): an image
    gets the same augmentation whatever the number of workers or ranks, and after a resume."""

    def __init__(self, source: Dataset, transform, indices: list[int] | None = None, seed: int = 0):
        self.source, self.transform, self.seed = source, transform, seed
        self.indices = list(range(len(source))) if indices is None else list(indices)
        self.warn = WarnOnce()  # a file that fails to decode is reported in the first epoch only

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key):
        if isinstance(key, tuple):
            epoch, i = key
            with seeded_randomness(image_seed(self.seed, epoch, i)):
                return self.item(i)
        return self.item(key)

    def item(self, i: int):
        image, label = read_or_substitute(self.source, self.indices[i], self.warn)
        return self.transform(image.convert("RGB")), label


def train_transform(img_size: int, mean, std, randaug: str | None, crop_min_scale: float = 0.08, reprob: float = 0.0):
    """timm's training transform: RandomResizedCrop, flip, RandAugment (the paper's fine-tuning, Table A), and random
    erasing at `reprob` (MAE's fine-tuning: one box of per-pixel noise)."""
    return create_transform(
        img_size,
        is_training=True,
        scale=(crop_min_scale, 1.0),
        auto_augment=randaug,
        color_jitter=None,
        interpolation="bicubic",
        re_prob=reprob,
        re_mode="pixel",
        re_count=1,
        mean=mean,
        std=std,
    )


def eval_transform(img_size: int, mean, std, crop_pct: float = 0.875):
    """Resize to img_size / crop_pct, centre crop, normalise (timm's, MAE's evaluation)."""
    return create_transform(img_size, is_training=False, crop_pct=crop_pct, interpolation="bicubic", mean=mean, std=std)
