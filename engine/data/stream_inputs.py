"""Shards (WebDataset tars, Hugging Face parquet) wherever a command reads images: pretraining streams its
training split; every other use (held-out images, the monitor's bank, probes, fine-tuning's val) reads the first
images of a split into memory, at most `max_images`, and says so when that is fewer than the split holds."""

import sys
import weakref
from pathlib import Path

from torch.utils.data import Dataset

from pretexts.engine.data.labelled_data import seeded_randomness
from pretexts.engine.data.shard_sets import MANIFEST, parquet_layout
from pretexts.engine.data.streams import ImageStream, first_images, is_stream, stream_shards
from pretexts.engine.data.warn_once import WarnOnce
from pretexts.errors import DataError

HEAD_IMAGES = 10_000  # what a command that needs a whole split reads of a stream unless told otherwise
# each live training stream's WarnOnce, by its shards: the images read from them into memory (the monitor's) report
# through it, so a file both read is warned about once and listed with the run's training images
STREAM_WARNINGS = weakref.WeakValueDictionary()


class StreamHead(Dataset):
    """The first `count` images of a stream's split (its shards' own order), as a map-style (PIL, label) dataset."""

    def __init__(self, shards, count: int, labelled: bool = False):
        shared = STREAM_WARNINGS.get(tuple(shards.urls))
        self.warn = WarnOnce() if shared is None else shared  # its records reach OUT/skipped_images.txt
        self.samples = list(first_images(shards, count, labelled, self.warn))
        self.targets = [int(label) for _, label in self.samples]
        self.classes = list(shards.classes) if shards.classes else None  # unnamed: labelled_splits numbers them
        self.total = len(shards)  # the images the split holds, of which these are the first

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        return self.samples[index]


def stream_head(
    spec: str, split: str, max_images: int = HEAD_IMAGES, labelled: bool = False, limit: str = "--max-images"
) -> StreamHead | None:
    """The first images of `split` of the shards `spec` names (None when it has no such split); `labelled`: each
    label checked, for probes and fine-tuning; `limit`: the option that sets `max_images`, for the note."""
    shards = stream_shards(spec, split)
    if shards is None:
        return None
    head = StreamHead(shards, min(max_images, len(shards)), labelled)
    if len(head) < len(shards):
        print(
            f"note: {split} of '{spec}' is a stream: reading its first {len(head)} of {len(shards)} images ({limit}).",
            file=sys.stderr,
            flush=True,
        )
    return head


def training_stream(
    spec: str, item, seed: int, rank: int, world: int, workers: int, batch_size: int, labelled: bool = False
) -> ImageStream:
    """The training split of `spec` as this rank's seeded stream of `item(image, label, seed)`s
    (engine.data.streams): `Augment` for pretraining, `SeededTransform` for fine-tuning (`labelled`: each label
    checked)."""
    shards = stream_shards(spec, "train")
    if shards is None:
        raise DataError(
            f"'{spec}' holds no training shards: name them train-*.tar or train*.parquet, or give the folder "
            f"`pretexts shard` wrote."
        )
    stream = ImageStream(
        shards, item, seed=seed, rank=rank, world=world, workers=workers, batch_size=batch_size, labelled=labelled
    )
    STREAM_WARNINGS[tuple(shards.urls)] = stream.warn
    return stream


class SeededTransform:
    """(PIL image, label, seed) -> (tensor, label) through a timm transform, Python's, numpy's and torch's
    generators seeded by `seed` (as `LabelledImages` does for a folder's images)."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, image, label: int, seed: int):
        with seeded_randomness(seed):
            return self.transform(image.convert("RGB")), label


def streamed_classes(spec: str, shards) -> list[str]:
    """The class names a fine-tune needs before it reads an image: the manifest's, or the parquet ClassLabel's."""
    if not shards.classes:
        raise DataError(
            f"the shards of '{spec}' name no classes, and fine-tuning needs them before it reads the stream: "
            f"write the shards with `pretexts shard` (its manifest.json lists the classes) or store a ClassLabel "
            f"column in the parquet files."
        )
    return list(shards.classes)


def finetune_stream_inputs(spec: str, label_fraction: float | None, max_images: int):
    """(training shards, val images) of shards for `finetune`: the training split streams, val is read whole (its
    first `max_images`)."""
    if label_fraction:
        raise DataError(
            "--label-fraction draws a class-balanced subset by index, which a stream has not: pack the subset into "
            "shards of its own (`pretexts shard` of a folder holding it), or fine-tune from a folder."
        )
    shards = stream_shards(spec, "train")
    val = None if shards is None else stream_head(spec, "val", max_images, labelled=True)
    if shards is None or val is None:
        missing = "train" if shards is None else "val"
        raise DataError(
            f"'{spec}' has no {SPLIT_WORDS[missing]} split; fine-tuning needs a training and a val split (accuracy is "
            f"measured on val): {missing_split_advice(spec, missing)}."
        )
    return shards, val


SPLIT_WORDS = {"train": "training", "val": "val"}


def is_parquet(spec: str) -> bool:
    """Whether the shards `spec` names are Hugging Face parquet files (else WebDataset tars)."""
    root = Path(spec).expanduser()
    if not root.is_dir() or (root / MANIFEST).is_file() or any(root.glob("*.tar")):
        return False
    return parquet_layout(root) is not None


def missing_split_advice(spec: str, split: str) -> str:
    """How shards get the `split` they lack, in their own format: parquet files are named by split (as `datasets`
    writes them), WebDataset shards packed again from a folder with both splits."""
    if is_parquet(spec):
        if split == "train":
            return "name its training files train*.parquet, or put them in a train/ folder"
        advice = "add its held-out images as validation*.parquet files (or val*, test*) beside the train*.parquet ones"
        if (Path(spec) / "train").is_dir():  # a folder per split
            advice += ", or in a val/ folder beside train/"
        return advice
    return (
        "shard again from a folder with train/ and val/ class folders (`pretexts shard` writes train-*.tar and "
        "val-*.tar; shards from other tools need those names too)"
    )


def no_val_note(spec: str) -> str:
    """Pretraining's note for data without a val split: no held-out error is measured, and how to give it one."""
    unmeasured = "so no held-out restoration error is measured"
    if not is_stream(spec):
        return f"'{spec}' has no val/ split, {unmeasured}; add val/ beside train/ for it."
    return f"'{spec}' has no val split, {unmeasured}; for it, {missing_split_advice(spec, 'val')}."
