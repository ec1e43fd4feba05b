"""Small shard sets for the streaming tests, written from the package's real CIFAR-10 images: WebDataset tars in the
`pretexts shard` format (with or without its manifest) and Hugging Face parquet files. Each sample's label is a unique
id, so a test can tell exactly which samples it read."""

import json
import socket
from functools import cache
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from pretexts.engine.data.streams import ImageStream

VAL_LABELS = 10_000  # the first val label: train and val ids never meet


@cache
def cifar_pngs() -> tuple[bytes, ...]:
    """The original PNG bytes of the package's 400 CIFAR-10 images, in a fixed order."""
    from pretexts.engine.data.datasets import SAMPLE_DIR  # here: the gloo ranks need not import torchvision

    return tuple(path.read_bytes() for path in sorted(SAMPLE_DIR.glob("*/*/*.png")))


def png_of(label: int) -> bytes:
    pngs = cifar_pngs()
    return pngs[label % len(pngs)]


def write_tars(folder: Path, counts: list[int], split: str = "train", first: int = 0, bad: tuple = ()) -> list[str]:
    """Shards folder/{split}-{i:06d}.tar of `counts` samples as `pretexts shard` writes them (key "{n:08d}", the PNG
    bytes and a .cls label); labels first, first+1, ...; the labels in `bad` get bytes that are no image. Returns the
    shard names."""
    import webdataset as wds

    folder.mkdir(parents=True, exist_ok=True)
    names, label = [], first
    for index, count in enumerate(counts):
        # one writer per shard: its maxcount makes each shard exactly `count` samples long
        with wds.ShardWriter(str(folder / f"{split}-%06d.tar"), maxcount=count, start_shard=index, verbose=0) as writer:
            for _ in range(count):
                image = b"not an image" if label in bad else png_of(label)
                writer.write({"__key__": f"{label - first:08d}", "png": image, "cls": str(label).encode()})
                label += 1
        names.append(f"{split}-{index:06d}.tar")
    return names


def write_manifest(folder: Path, splits: dict[str, tuple[list[str], list[int]]], classes=None) -> None:
    """folder/manifest.json for the shards already written: {split: (shard names, counts)}."""
    entries = {
        split: {"shards": names, "counts": counts, "images": sum(counts), "skipped": []}
        for split, (names, counts) in splits.items()
    }
    manifest = {"format": "pretexts-shards/1", "source": "cifar", "classes": classes, "splits": entries}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def write_shard_set(folder: Path, train: list[int], val: list[int] = (), manifest: bool = True) -> Path:
    """A shard set of train (and val) shards, labelled 0.. (and VAL_LABELS..), with its manifest when asked."""
    splits = {"train": (write_tars(folder, train), list(train))}
    if val:
        splits["val"] = (write_tars(folder, list(val), "val", VAL_LABELS), list(val))
    if manifest:
        write_manifest(folder, splits, classes=["airplane", "automobile"])
    return folder


def write_parquet(path: Path, labels: list[int]) -> Path:
    """One Hugging Face parquet file of the images `labels` name, with an image and an int label column."""
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [{"bytes": png_of(label), "path": None} for label in labels]
    table = datasets.Dataset.from_dict({"image": images, "label": list(labels)})
    table.cast_column("image", datasets.Image()).to_parquet(str(path))
    return path


def write_parquet_set(folder: Path, counts: list[int], split: str = "train", first: int = 0) -> list[int]:
    """folder/{split}-{i:05d}-of-{n:05d}.parquet (the Hugging Face hub's names); returns the labels written."""
    labels, start = [], first
    for index, count in enumerate(counts):
        write_parquet(folder / f"{split}-{index:05d}-of-{len(counts):05d}.parquet", range(start, start + count))
        labels += range(start, start + count)
        start += count
    return labels


class LabelItem:
    """item(image, label, seed) -> label: what the sharding tests need."""

    def __call__(self, image, label: int, seed: int) -> int:
        return label


class AugmentedItem:
    """item(image, label, seed) -> (uint8 HWC tensor, label), randomly cropped and flipped as `seed` says."""

    def __init__(self, size: int = 16):
        from pretexts.engine.data.loader import pretrain_transform

        self.transform = pretrain_transform(size)

    def __call__(self, image, label: int, seed: int):
        self.transform.set_random_seed(seed)
        array = self.transform(image=np.asarray(image, dtype=np.uint8))["image"]
        return torch.from_numpy(np.array(array, copy=True)), label


def read_epoch(stream: ImageStream, epoch: int, workers: int, start: int = 0) -> list:
    """The stream's batches of one epoch from `start`, through a DataLoader with `workers` workers, forked
    (where the default is spawn, each worker would import torch again)."""
    stream.set_position(epoch, start)
    context = "fork" if workers else None
    return list(DataLoader(stream, batch_size=stream.batch_size, num_workers=workers, multiprocessing_context=context))


def epoch_labels(stream: ImageStream, epoch: int, workers: int, start: int = 0) -> list[int]:
    """The labels of read_epoch's batches, in order (the stream's item gives labels)."""
    return [label for batch in read_epoch(stream, epoch, workers, start) for label in batch.tolist()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def labels_by_rank(rank: int, world: int, port: int, sets: dict, out: str, batch_size: int) -> None:
    """One gloo rank (torch.multiprocessing.start_processes): read epochs 0 and 1 of each shard set with 2 loader
    workers; rank 0 writes every rank's labels, gathered over gloo, to `out` as JSON {set: [[epoch0, epoch1] per
    rank]}."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        mine = {}
        for name, shards in sets.items():
            place = {"rank": dist.get_rank(), "world": dist.get_world_size()}
            stream = ImageStream(shards, LabelItem(), seed=3, workers=2, batch_size=batch_size, buffer=5, **place)
            mine[name] = [epoch_labels(stream, epoch, 2) for epoch in (0, 1)]
        gathered = [None] * world
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            Path(out).write_text(json.dumps({name: [g[name] for g in gathered] for name in sets}))
    finally:
        dist.destroy_process_group()
