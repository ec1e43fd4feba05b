"""Stream images from shards (WebDataset tars or Hugging Face parquet) with exact sharding and exact resume.

Each epoch the shard list is permuted by (seed, epoch); the `world * workers` readers ("slots") take every
slots-th shard of it, so ranks and loader workers read disjoint samples. A reader passes its raw, undecoded samples
through a seeded shuffle buffer and yields the same number of them as every other reader, so all ranks take the same
number of steps. A mid-epoch resume replays the readers' sequences, skipping the batches already done without
decoding them, and continues with exactly the batches the uninterrupted epoch would have produced next.
"""

import json
import os
import random
import tarfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice, repeat
from pathlib import Path
from typing import NamedTuple

from PIL import Image
from torch.utils.data import IterableDataset, get_worker_info

from pretexts.engine.data.image_check import SUBSTITUTE_TRIES, counted, decode, decode_or_substitute
from pretexts.engine.data.loader import image_seed
from pretexts.engine.data.shard_sets import MANIFEST, ShardSet, is_stream, require, stream_shards
from pretexts.engine.data.warn_once import WarnOnce
from pretexts.errors import DataError, ParameterError

__all__ = ["ImageStream", "ShardSet", "decode", "first_images", "is_stream", "stream_shards"]

IMAGE_SUFFIXES = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "gif", "ppm", "pgm", "pbm", "pnm")
READERS = {"wds": ("webdataset", "wds"), "parquet": ("datasets", "hf")}
PARQUET_BATCH = 64
WARN = WarnOnce()  # the unreadable samples `first_images` has warned about when given no WarnOnce of its own


class RawSample(NamedTuple):
    """One undecoded sample: its shard's file name, its key there, the image (bytes, a file path or None), label,
    and the file it was packed from where the shard records it (a tar's path.txt, a parquet path column, an image
    cell's path), for warnings."""

    shard: str
    key: str
    data: bytes | str | None
    label: int | None  # None: the sample has none
    source: str | None = None  # `pretexts shard`'s: absolute where its manifest names the folder it packed

    @property
    def sample_id(self) -> int:
        """A stable integer for the image's augmentation seed, whatever its position in the stream."""
        return zlib.crc32(f"{self.shard}/{self.key}".encode())


class ImageStream(IterableDataset):
    """The rank's samples of `shards` for one epoch, as `item(image, label, seed)` gives them.

    Iterate it through a DataLoader with `workers` workers (0: the main process) and `batch_size`; call
    `set_position(epoch, start)` before creating each epoch's iterator (the workers copy the stream when they start,
    so persistent workers would keep an old position).
    """

    def __init__(
        self,
        shards: ShardSet,
        item: Callable,
        seed: int = 0,
        rank: int = 0,
        world: int = 1,
        workers: int = 0,
        batch_size: int = 1,
        shuffle: bool = True,
        buffer: int = 1000,
        labelled: bool = False,
    ):
        if world < 1 or not 0 <= rank < world or workers < 0 or batch_size < 1 or buffer < 0:
            raise ParameterError(
                f"ImageStream needs 0 <= rank < world, workers >= 0, batch_size >= 1 and buffer >= 0; got rank {rank}, "
                f"world {world}, workers {workers}, batch_size {batch_size}, buffer {buffer}."
            )
        require(*READERS[shards.kind])
        self.shards, self.item, self.seed, self.shuffle, self.buffer = shards, item, seed, shuffle, buffer
        self.labelled = labelled  # every label checked (`checked_label`): a fine-tune's stream
        self.warn = WarnOnce()  # an unreadable sample is reported in the first epoch only
        self.rank, self.world, self.workers, self.batch_size = rank, world, max(1, workers), batch_size
        self.slots = world * self.workers
        count = len(shards.urls)
        if count < self.slots:
            raise DataError(
                f"{counted(count, 'shard')} cannot feed {readers(world, workers)} ({self.slots} readers): write at "
                f"least {self.slots} shards (a reader takes whole shards; `pretexts shard` with a smaller --shard-size)"
                f"{fewer_readers(count, world, workers)}."
            )
        self.per_slot = self.fewest_samples() // batch_size * batch_size
        if self.per_slot == 0:
            raise DataError(
                f"the {counted(count, 'shard')} ({counted(len(shards), 'sample')}) give one of {self.slots} readers "
                f"fewer samples than a batch of {batch_size}: write more samples, or use a smaller batch"
                f"{', or fewer --workers' if workers > 1 else ', or fewer ranks' if world > 1 else ''}."
            )
        self.epoch, self.start = 0, 0

    def fewest_samples(self) -> int:
        """The fewest samples a reader can get in any epoch: each epoch's readers then all yield this many (a reader
        holding more drops its tail), so every epoch has the same length, as schedules need."""
        counts = self.shards.counts
        if not self.shuffle:
            return min(sum(counts[slot :: self.slots]) for slot in range(self.slots))
        return sum(sorted(counts)[: len(counts) // self.slots])  # a reader gets at least this many shards

    def set_position(self, epoch: int, start: int = 0) -> None:
        """Begin `epoch` after the first `start` samples of this rank (a multiple of batch_size)."""
        if start % self.batch_size or not 0 <= start <= self.epoch_length():
            raise ParameterError(
                f"a stream's start must be a multiple of the batch size {self.batch_size} within the epoch's "
                f"{self.epoch_length()} samples; got {start}."
            )
        self.epoch, self.start = epoch, start

    def epoch_length(self) -> int:
        """This rank's samples per epoch."""
        return self.workers * self.per_slot

    def __len__(self) -> int:
        return self.epoch_length() - self.start

    def shard_order(self) -> list[int]:
        order = list(range(len(self.shards.urls)))
        if self.shuffle:
            random.Random(f"pretexts-shards/{self.seed}/{self.epoch}").shuffle(order)
        return order

    def slot_samples(self, slot: int, tally: dict | None = None) -> Iterator[RawSample]:
        """The raw samples of one reader this epoch: its shards in order, through the seeded shuffle buffer;
        `tally` counts the samples read of each shard (by index), to name one that holds fewer than stated."""
        shards = self.shard_order()[slot :: self.slots]
        samples = chain.from_iterable(counted_samples(self.shards, i, tally) for i in shards)
        if not self.shuffle or self.buffer <= 1:
            return samples
        return shuffle_buffer(samples, self.buffer, random.Random(f"pretexts-buffer/{self.seed}/{self.epoch}/{slot}"))

    def __iter__(self):
        info = get_worker_info()
        physical, count = (info.id, info.num_workers) if info is not None else (0, 1)
        if count != self.workers:
            raise ParameterError(
                f"this ImageStream was built for {self.workers} loader workers but a DataLoader with {count} iterates "
                "it; give both the same number."
            )
        # the loader takes batch j from worker j % W; after k batches it restarts at physical worker 0
        done = self.start // self.batch_size
        logical = (physical + done) % self.workers
        skip = len(range(logical, done, self.workers)) * self.batch_size
        slot = self.rank * self.workers + logical
        read, tally = 0, {}
        for read, (sample, neighbours) in enumerate(with_neighbours(self.slot_samples(slot, tally)), 1):
            if read > self.per_slot:
                return
            if read > skip:
                image, source = decode_or_substitute(sample, neighbours, self.warn)
                label = checked_label(source, self.shards.classes, self.labelled)
                yield self.item(image, label, image_seed(self.seed, self.epoch, sample.sample_id))
        if read < self.per_slot:  # the ranks would then take different numbers of steps, and hang
            raise DataError(
                f"{short_shards(self.shards, self.shard_order()[slot :: self.slots], tally)}; write the "
                "shards and their manifest again."
            )


def readers(world: int, workers: int) -> str:
    """Who reads a rank's shards: its loader workers, or with --workers 0 its own process (one reader)."""
    ranks = counted(world, "rank")
    if workers == 0:
        return f"{ranks} with --workers 0 (each rank's process reads)"
    return f"{ranks} x {counted(workers, 'loader worker')}"


def fewer_readers(count: int, world: int, workers: int) -> str:
    """The other way out: fewer loader workers while a rank has several, else fewer ranks."""
    if workers > 1:
        return (
            f", or use --workers {count // world}" if count >= world else f", or run at most {counted(count, 'rank')}"
        )
    return f", or run at most {counted(count, 'rank')}" if world > 1 else ""


def first_images(
    shards: ShardSet, count: int, labelled: bool = False, warn: WarnOnce | None = None
) -> list[tuple[Image.Image, int]]:
    """The first `count` samples in the shards' own order (no shuffle), decoded: the same images every call.
    `labelled`: every sample's label is checked (`checked_label`); else a sample without one reads as class 0.
    `warn`: the WarnOnce that reports (and records) an unreadable sample; none: this module's `WARN`."""
    require(*READERS[shards.kind])
    samples = chain.from_iterable(read_shard(shards, i) for i in range(len(shards.urls)))
    images = []
    for sample, neighbours in with_neighbours(samples):
        if len(images) >= count:
            break
        image, source = decode_or_substitute(sample, neighbours, warn or WARN)
        images.append((image, checked_label(source, shards.classes, labelled)))
    return images


def checked_label(sample: RawSample, classes: list | None, labelled: bool) -> int:
    """The sample's label. Where labels are needed (`labelled`: probes, fine-tuning) one that is missing, negative or
    past the named classes is a DataError naming the sample; pretraining reads none (a missing label is class 0)."""
    label = sample.label
    if not labelled:
        return 0 if label is None else label
    where = f"sample {sample.key} of shard '{sample.shard}'"
    fix = "write the shards again with `pretexts shard` from class folders"
    if label is None:
        raise DataError(
            f"{where} has no label, and probing and fine-tuning need every sample labelled (a .cls member, or a "
            f"parquet label column): {fix}, or drop the unlabelled samples."
        )
    if label < 0 or (classes and label >= len(classes)):
        named = f"the {len(classes)} classes 0-{len(classes) - 1} the shards name" if classes else "a class index"
        raise DataError(f"{where} has the label {label}, not one of {named}: {fix}.")
    return label


def short_shards(shards: ShardSet, indices: list[int], tally: dict) -> str:
    """Which of a reader's shards gave fewer samples than their counts say, and how many."""
    short = [(Path(shards.urls[i]).name, tally.get(i, 0), shards.counts[i]) for i in indices]
    short = [entry for entry in short if entry[1] < entry[2]]
    if len(short) == 1:
        name, got, count = short[0]
        return f"shard {name} holds {got} samples, fewer than its stated {count}"
    named = ", ".join(f"{name} ({got} of {count})" for name, got, count in short)
    return f"shards {named or ', '.join(Path(shards.urls[i]).name for i in indices)} hold fewer samples than stated"


def counted_samples(shards: ShardSet, index: int, tally: dict | None) -> Iterator[RawSample]:
    for sample in read_shard(shards, index):
        if tally is not None:
            tally[index] = tally.get(index, 0) + 1
        yield sample


def read_shard(shards: ShardSet, index: int) -> Iterator[RawSample]:
    if shards.kind == "wds":
        return tar_samples(shards.urls[index])
    if shards.kind == "parquet":
        return parquet_samples(shards.urls[index], shards.image_column, shards.label_column)
    raise ParameterError(f"unknown shard kind '{shards.kind}'; use 'wds' or 'parquet'.")


def tar_samples(url: str) -> Iterator[RawSample]:
    """A tar shard's samples through webdataset, undecoded."""
    wds = require("webdataset", "wds")
    name, packed = Path(url).name, packed_folder(str(Path(url).parent))
    try:
        for sample in wds.DataPipeline(wds.SimpleShardList([url]), wds.tarfile_to_samples()):
            members = {key.lower(): value for key, value in sample.items() if not key.startswith("__")}
            image = next((members[ext] for ext in IMAGE_SUFFIXES if ext in members), None)
            label = label_of(members.get("cls"), url, sample["__key__"])
            source = text_of(members.get("path.txt"))
            yield RawSample(name, sample["__key__"], image, label, os.path.join(packed, source) if source else None)
    except (OSError, ValueError, tarfile.TarError) as err:
        raise DataError(f"shard '{url}' cannot be read ({cause(err)}); write it again.") from None


def cause(err: Exception) -> str:
    """The error's message alone: webdataset wraps it in a tuple with the stream and the path."""
    first = err.args[0] if err.args else err
    text = str(first[0] if isinstance(first, tuple) and first else first)
    return text.split(" @ <")[0] or type(err).__name__


def parquet_samples(url: str, image_column: str, label_column: str | None) -> Iterator[RawSample]:
    """A parquet file's rows through Hugging Face datasets (streaming, images left undecoded)."""
    datasets = require("datasets", "hf")
    name = Path(url).name
    try:  # datasets parses the schema's Hugging Face metadata here, raising many types for a malformed one
        stream = datasets.load_dataset("parquet", data_files=[url], split="train", streaming=True)
        path_column = (
            "path" if "path" in (stream.features or {}) and "path" not in (image_column, label_column) else None
        )
        stream = stream.select_columns([image_column, *filter(None, (label_column, path_column))])
        if isinstance(stream.features.get(image_column), datasets.Image):
            stream = stream.cast_column(image_column, datasets.Image(decode=False))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:
        raise DataError(
            f"parquet file '{url}' cannot be read ({cause(err)}); write it again (with Hugging Face metadata that "
            f"datasets reads, or none)."
        ) from None
    row, path_checked = 0, False
    # .iter() reads the file whole in this process; plain iteration would split it among the loader's workers
    batches = stream.iter(batch_size=PARQUET_BATCH)
    while True:
        try:  # a data page past an intact footer fails only here, as pyarrow's ArrowInvalid (a ValueError)
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, ValueError) as err:
            raise DataError(
                f"parquet file '{url}' cannot be read after row {row} ({cause(err)}); write it again."
            ) from None
        labels = batch[label_column] if label_column else repeat(None)
        sources = batch[path_column] if path_column else repeat(None)
        for value, label, source in zip(batch[image_column], labels, sources):
            data = image_data(value, url)
            if isinstance(data, str) and not path_checked:  # one missing file is skipped; the first, a wrong root
                check_path_cell(data, value, url, row)
                path_checked = True
            yield RawSample(name, str(row), data, label_of(label, url, row), text_of(source) or cell_path(value, data))
            row += 1


def check_path_cell(path: str, value, url: str, row: int) -> None:
    """DataError when the first image cell of a parquet file that holds a path, not bytes, names no file: the paths
    are then read from another folder than they were written for, and every image would fail."""
    if Path(path).exists():  # a folder or a FIFO there is one bad sample, substituted
        return
    where = (
        f"relative to the parquet file's folder '{Path(url).parent}'"
        if isinstance(value, dict)
        else "as given (relative to the current folder)"
    )
    raise DataError(
        f"the image cells of parquet file '{url}' hold file paths, not the images' bytes, and row {row}'s, "
        f"'{value.get('path') if isinstance(value, dict) else value}', names no file (paths are read {where}): write "
        f"the parquet with the images' bytes in its cells, or with absolute paths."
    )


def image_data(value, url: str) -> bytes | str | None:
    """A parquet image cell -> its bytes, or the path of its file: a {"bytes", "path"} cell's path relative to the
    parquet file's folder, a plain string as given."""
    if isinstance(value, dict):
        if value.get("bytes"):
            return value["bytes"]
        path = value.get("path")
        return str(Path(url).parent / path) if path else None
    return value if isinstance(value, (bytes, str)) else None


def cell_path(value, data: bytes | str | None) -> str | None:
    """The file an image cell names: the one read (`data`, a cell of a path), or the one a {"bytes", "path"} cell
    was made from (Hugging Face keeps its name beside the bytes)."""
    if isinstance(data, str):
        return data
    return value.get("path") or None if isinstance(value, dict) else None


def packed_folder(folder: str) -> str:
    """The folder `pretexts shard` packed into the shards in `folder`, as its manifest records it (absolute), which
    a sample's path.txt is relative to; "" (the path as recorded) without a manifest or such a record. Read at
    each shard a reader opens: small beside the shard, and never stale."""
    try:
        packed = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError, AttributeError):  # no manifest, or not a mapping: stream_shards says what is wrong
        return ""
    return packed if isinstance(packed, str) and os.path.isabs(packed) else ""


def text_of(value) -> str | None:
    """A sample's text field (a tar member's bytes, a parquet string) as a string; None when absent or empty."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)  # a name that is not UTF-8 kept as the file system holds it
    return value if isinstance(value, str) and value else None


def label_of(value, url: str, key) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DataError(f"sample {key} of '{url}' has the label {value!r}, not an integer class index.") from None


def shuffle_buffer(samples: Iterable, size: int, rng: random.Random) -> Iterator:
    """WebDataset's shuffle: keep `size` samples, yield a random one and put the next in its place; drain at the end."""
    pool = []
    for sample in samples:
        if len(pool) < size:
            pool.append(sample)
            continue
        index = rng.randrange(size)
        yield pool[index]
        pool[index] = sample
    rng.shuffle(pool)
    yield from pool


def with_neighbours(samples: Iterator[RawSample]):
    """(sample, function giving its substitutes) pairs: the samples after it, then those before it. Both are fixed by
    the reader's sequence alone, so a resumed run substitutes the same image."""
    ahead = deque(islice(samples, SUBSTITUTE_TRIES))
    behind = deque(maxlen=SUBSTITUTE_TRIES)
    while ahead:
        current = ahead.popleft()
        ahead.extend(islice(samples, 1))
        yield current, lambda: [*ahead, *reversed(behind)]
        behind.append(current)
