"""Input pipeline throughput: images/s per CPU core, from an ImageFolder or WebDataset shards, against a GPU step.

What one core decodes and augments (and corrupts) per second, set against what one GPU's training step consumes.

    python benchmarks/input_pipeline.py --images 1024 --sizes 224 32
    python benchmarks/input_pipeline.py --sizes 224 --large-size 500 375   # ImageNet's typical pixel count

Two image sources: the data's train split as it is (the CIFAR-10 subset: 32x32 PNGs, which RandomResizedCrop
upscales at 224 px), and a temporary folder of --large of them upscaled to --large-size JPEGs of quality 90 (closer
to ImageNet's files; smaller on disk than ImageNet's ~110 KB, since upscaled images hold little detail). Each is
read through the folder path (AugmentedImages + EpochSampler + DataLoader) and through the shard path
(`pretexts shard`'s write_shards, then ImageStream), at each output size.

The per-core rates are process CPU time (time.process_time) in this one process with the loader's workers=0 and one
torch and OpenCV thread: images/s per core = 1 / CPU seconds per image. That holds on a loaded machine, where wall
clock does not. The default task's corruption (random-mask) runs on the device in training; here it also runs on
the CPU on each batch, timed apart. The wall column (2 loader workers) is secondary and noisy on a busy machine.
Asserts nothing.
"""

import argparse
import math
import os
import statistics
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import cv2
import torch
from PIL import Image
from torch.utils.data import ConcatDataset

import pretexts
from pretexts.engine.data.datasets import image_folder
from pretexts.engine.data.loader import (
    Augment,
    AugmentedImages,
    EpochSampler,
    batches,
    make_loader,
    pretrain_transform,
    to_device,
)
from pretexts.engine.data.shard_writer import source_folder, write_shards
from pretexts.engine.data.streams import ImageStream, stream_shards

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10-subset"
TASK = "random-mask"  # the default task (`pretexts train --task`)
LARGE_QUALITY = 90
# docs/results/gpu-h100.md (2026-11-24, one H100, 224 px): ViT-B/16 at batch 32, the supervised step 93.5 ms
# (fp32) and the energy step (N=2, exact, bf16) 2.06x that.
GPU_BATCH = 32
GPU_STEP_MS = {"energy": 93.5 * 2.06, "supervised": 93.5}
GPU_SIZE = 224


@dataclass
class Source:
    """A folder of images to read: `folder` for `pretexts shard`, `train` the ImageFolder of its train split."""

    name: str
    folder: Path
    train: Path


@dataclass
class Row:
    source: str
    size: int
    path: str
    loader_s: float  # CPU seconds per image: decode + augment (+ collate)
    corrupt_s: float  # CPU seconds per image: to float and the corruption
    wall: float  # images/s with `workers` loader workers, wall clock


@cache
def folder_images(train: Path):
    """The checked ImageFolder of `train` (its scan opens every file: once per folder)."""
    return image_folder(train)


def train_folder(root: Path) -> Path:
    """The ImageFolder of a data folder's training images (train/ in the ImageNet layout, else all of it)."""
    return root / "train" if (root / "train").is_dir() else root


def large_jpegs(train: Path, out: Path, count: int, size: tuple[int, int]) -> Source:
    """`count` images of `train`, spread over its classes, upscaled to `size` (width, height) JPEGs under out/CLASS/."""
    dataset = folder_images(train)
    step = max(1, len(dataset.samples) // count)
    for path, label in dataset.samples[::step][:count]:
        target = out / dataset.classes[label] / (Path(path).stem + ".jpg")
        target.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(path) as image:
            large = image.convert("RGB").resize(size, Image.Resampling.BICUBIC)
        large.save(target, quality=LARGE_QUALITY)
    return Source(f"{size[0]}x{size[1]} JPEG q{LARGE_QUALITY}", out, out)


def describe(source: Source) -> str:
    sizes = [Path(path).stat().st_size for path, _ in folder_images(source.train).samples]
    return f"{source.name}: {len(sizes)} images under {source.train}, mean {statistics.mean(sizes) / 1024:.1f} KiB"


def shard_size(count: int) -> int:
    """4 shards or more (each loader worker reads whole shards), of at most 1000 images (`pretexts shard`'s)."""
    return min(1000, math.ceil(count / 4))


def folder_pipeline(source: Source, size: int, batch: int, repeat: int):
    """workers -> an iterator of batches through the folder path (AugmentedImages, EpochSampler, DataLoader), one
    epoch over the folder's images `repeat` times (long epochs: no loader restart in the timed part)."""
    dataset = AugmentedImages(ConcatDataset([folder_images(source.train)] * repeat), pretrain_transform(size), seed=0)

    def run(workers: int):
        return one_epoch(dataset, EpochSampler(dataset, shuffle=True, seed=0), batch, workers)

    return run


def shard_pipeline(shards: Path, size: int, batch: int, repeat: int):
    """workers -> an iterator of batches through the shard path (ImageStream), one epoch over the shard list
    `repeat` times (each shard read again)."""
    single = stream_shards(str(shards), "train")
    shard_set = replace(single, urls=single.urls * repeat, counts=single.counts * repeat)

    def run(workers: int):
        stream = ImageStream(shard_set, Augment(pretrain_transform(size)), seed=0, workers=workers, batch_size=batch)
        return one_epoch(stream, stream, batch, workers)

    return run


def one_epoch(dataset, positioned, batch: int, workers: int):
    """The image batches of `dataset`'s epoch 0; `positioned` (the sampler, or the stream itself) is told it."""
    positioned.set_position(0)
    with batches(make_loader(dataset, batch, positioned, workers)) as loader:
        for images, _ in loader:
            yield images


def cpu_seconds(pipeline, count: int, task) -> tuple[float, float]:
    """(CPU seconds per image of the loader, of the corruption), in this process with workers=0."""
    generator = torch.Generator().manual_seed(0)
    cpu = torch.device("cpu")
    with closing(pipeline(0)) as loader:
        task(to_device(next(loader), cpu), generator)  # warm-up: first files, first allocations
        loading = corrupting = 0.0
        images = 0
        while images < count:
            start = time.process_time()
            batch = next(loader)
            loaded = time.process_time()
            task(to_device(batch, cpu), generator)
            corrupting += time.process_time() - loaded
            loading += loaded - start
            images += len(batch)
    return loading / images, corrupting / images


def wall_rate(pipeline, count: int, workers: int) -> float:
    """Images/s by the wall clock through `workers` loader workers, from when their first batches are in (they
    start together, so those come at once after the start-up)."""
    with closing(pipeline(workers)) as loader:
        for _ in range(max(1, workers)):
            next(loader)
        start, images = time.perf_counter(), 0
        while images < count:
            images += len(next(loader))
        return images / (time.perf_counter() - start)


def repeats(count: int, images: int, batch: int, workers: int) -> int:
    """How many times to go over `images` so that one epoch holds the `count` timed images, the warm-up batches
    and what the stream's readers drop (twice that, to be safe)."""
    return math.ceil(2 * (count + (workers + 1) * batch) / images)


def gpu_rates() -> dict[str, float]:
    return {step: GPU_BATCH / (ms / 1000) for step, ms in GPU_STEP_MS.items()}


def workers_needed(rate_per_core: float, size: int) -> dict[str, str]:
    """Loader cores one GPU needs for each step; only at the GPU page's size (other sizes were not timed there)."""
    if size != GPU_SIZE:
        return dict.fromkeys(GPU_STEP_MS, "-")
    return {step: str(math.ceil(rate / rate_per_core)) for step, rate in gpu_rates().items()}


def rate(seconds: float) -> str:
    value = 1 / seconds
    return f"{value:.3g}" if value < 1000 else f"{value:.0f}"


def table(rows: list[Row], workers: int) -> str:
    head = (
        "| images | px | path | decode+augment img/s/core | corruption (CPU) img/s/core | both img/s/core "
        f"| wall img/s, {workers} workers (noisy) | cores per GPU: energy | cores per GPU: supervised |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        need = workers_needed(1 / row.loader_s, row.size)
        lines.append(
            f"| {row.source} | {row.size} | {row.path} | {rate(row.loader_s)} | {rate(row.corrupt_s)} "
            f"| {rate(row.loader_s + row.corrupt_s)} | {row.wall:.0f} | {need['energy']} | {need['supervised']} |"
        )
    return "\n".join(lines)


def measure(sources: list[Source], tmp: Path, args) -> list[Row]:
    task = pretexts.create_pretext(TASK)
    rows = []
    for index, source in enumerate(sources):
        shards = tmp / f"shards-{index}"
        count = len(folder_images(source.train))
        summary = write_shards(source.folder, shards, shard_size=shard_size(count))
        print(f"{source.name}: {summary.shards} shards, {summary.bytes / 2**20:.1f} MiB", flush=True)
        for size in args.sizes:
            repeat = repeats(args.images, count, args.batch, args.workers)
            paths = {
                "folder": folder_pipeline(source, size, args.batch, repeat),
                "shards": shard_pipeline(shards, size, args.batch, repeat),
            }
            timed = {path: [] for path in paths}
            for _ in range(args.repeats):  # the paths alternate, so a change in the machine's load hits both
                for path, pipeline in paths.items():
                    timed[path].append(cpu_seconds(pipeline, args.images, task))
            for path, pipeline in paths.items():
                loader_s = statistics.median(loading for loading, _ in timed[path])
                corrupt_s = statistics.median(corrupting for _, corrupting in timed[path])
                wall = wall_rate(pipeline, args.images, args.workers)
                rows.append(Row(source.name, size, path, loader_s, corrupt_s, wall))
                spread = " ".join(f"{1 / loading:.0f}" for loading, _ in timed[path])
                print(
                    f"  {size} px {path}: {1 / loader_s:.0f} img/s/core loading (runs: {spread}), "
                    f"{1 / corrupt_s:.0f} corrupting; wall {wall:.0f} img/s ({args.workers} workers)",
                    flush=True,
                )
    return rows


def conclusion(rows: list[Row]) -> list[str]:
    """For each GPU step: its images/s and the loader cores it needs, the fewest and the most over the rows."""
    lines = []
    for step, gpu in gpu_rates().items():
        cores = [math.ceil(gpu * row.loader_s) for row in rows if row.size == GPU_SIZE]
        if cores:
            need = f"{min(cores)}" if min(cores) == max(cores) else f"{min(cores)} to {max(cores)}"
            lines.append(
                f"{step} step (ViT-B/16, batch {GPU_BATCH}, {GPU_STEP_MS[step]:.0f} ms): {gpu:.0f} img/s, "
                f"{need} loader core(s) per GPU at {GPU_SIZE} px"
            )
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1024, help="images timed per run (after one warm-up batch)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[224, 32], help="output sizes (RandomResizedCrop)")
    parser.add_argument(
        "--data",
        default=str(SHARED_DATA) if SHARED_DATA.is_dir() else "sample",
        help="an ImageFolder tree (train/ and val/, or class folders), or 'sample'",
    )
    parser.add_argument("--repeats", type=int, default=3, help="CPU-time runs per row, alternated (the median)")
    parser.add_argument("--batch", type=int, default=32, help="loader batch (the GPU page's ViT-B/16 batch)")
    parser.add_argument("--large", type=int, default=200, help="images upscaled to larger JPEGs (0: none)")
    parser.add_argument(
        "--large-size", type=int, nargs=2, default=[256, 256], metavar=("W", "H"), help="the larger JPEGs' size"
    )
    parser.add_argument("--workers", type=int, default=2, help="loader workers of the wall-clock column")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    cv2.setNumThreads(0)  # OpenCV (albumentations' resize) sequential: one thread, as a loader worker
    root = source_folder(args.data)
    train = train_folder(root)
    first = Path(folder_images(train).samples[0][0])
    with Image.open(first) as image:
        data = Source(f"{root.name} ({image.width}x{image.height} {first.suffix[1:].upper()})", root, train)
    with tempfile.TemporaryDirectory(prefix="input-pipeline-") as tmp:
        sources = [data]
        if args.large:
            sources.append(large_jpegs(data.train, Path(tmp) / "large", args.large, tuple(args.large_size)))
        print(
            f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}; torch {torch.__version__}, "
            f"1 thread; batch {args.batch}; per row the median of {args.repeats} runs of {args.images} images; "
            f"corruption: {TASK}"
        )
        for source in sources:
            print(describe(source))
        rows = measure(sources, Path(tmp), args)
    print()
    print(table(rows, args.workers))
    print()
    lines = conclusion(rows)
    if not lines:
        print(f"cores per GPU: only at {GPU_SIZE} px, the size of docs/results/gpu-h100.md (add it to --sizes)")
        return
    print("GPU rates from docs/results/gpu-h100.md; cores per GPU = ceil(GPU img/s / decode+augment img/s/core):")
    for line in lines:
        print(f"- {line}")


if __name__ == "__main__":
    main()
