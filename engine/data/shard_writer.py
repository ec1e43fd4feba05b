"""Pack an image folder into WebDataset tar shards with a manifest (`pretexts shard`), the format the stream reads.

OUT/{split}-{i:06d}.tar hold samples keyed "{n:08d}" (the running index in the split): "{key}.{ext}" is the image
file's own bytes (never re-encoded), "{key}.cls" its label in ASCII digits (none for unlabelled images), and
"{key}.path.txt" the file's path relative to the folder packed, which a warning about the sample names (joined
with the manifest's "source", the folder packed, made absolute). OUT/manifest.json lists each split's shards, their
counts, the images skipped as unreadable, the classes, and that source folder.
"""

import contextlib
import errno
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from pretexts.engine.data.datasets import SAMPLE_DIR, FlatImageFolder, image_folder
from pretexts.engine.data.image_check import unread_reason
from pretexts.engine.data.labelled_data import match_val_classes
from pretexts.engine.data.shard_sets import require
from pretexts.errors import DataError, OutputError

FORMAT = "pretexts-shards/1"
MANIFEST = "manifest.json"
SPLITS = ("train", "val")
LOCK_FILE = ".lock"  # OUT's lock while `pretexts shard` writes it (run_folder.RunLock): no file of the set


@dataclass
class SplitImages:
    """One split's readable images as (path, label or None), and the unreadable ones as (path, why)."""

    samples: list[tuple[str, int | None]]
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class FolderLayout:
    """What `list_images` found: "imagenet" (train/ and val/), "classes" (class folders: all train) or "flat"
    (unlabelled images); the class names (None for flat) and the splits' images."""

    kind: str
    classes: list[str] | None
    splits: dict[str, SplitImages]
    loose: int = 0  # image files lying beside class folders, not packed (ImageFolder's layout)
    notes: list[str] = field(default_factory=list)  # warnings about them


@dataclass
class ShardSummary:
    """What `write_shards` wrote: the manifest, the layout it read, the bytes of every shard together, the
    unreadable images skipped, as (path, why), and how many image files beside class folders were left out."""

    out: Path
    manifest: dict
    layout: str
    bytes: int
    skipped: list[tuple[str, str]]
    loose: int = 0

    @property
    def images(self) -> int:
        return sum(split["images"] for split in self.manifest["splits"].values())

    @property
    def shards(self) -> int:
        return sum(len(split["shards"]) for split in self.manifest["splits"].values())


def source_folder(source) -> Path:
    """The folder named by SOURCE ("sample": the embedded images); DataError for a missing path, a file or a
    CIFAR-10 folder (pickled batches, no image files)."""
    if str(source) == "sample":
        return SAMPLE_DIR
    root = Path(source).expanduser()
    if not root.exists():
        raise DataError(f"source folder '{source}' does not exist; give an ImageFolder tree or a folder of images.")
    if not root.is_dir():
        raise DataError(f"source '{source}' is a file; give the folder that holds the images or the class folders.")
    if (root / "cifar-10-batches-py").is_dir():
        raise DataError(
            f"'{source}' is a CIFAR-10 folder (pickled batches, no image files); shard an ImageFolder tree "
            f"or a folder of images, or train on the folder as it is."
        )
    return root


def readable(dataset, labelled: bool = True) -> SplitImages:
    """A checked ImageFolder (`image_folder`) as (path, label or None) pairs and its skipped list."""
    samples = [(path, label if labelled else None) for path, label in dataset.samples]
    return SplitImages(samples, [*dataset.scan.bad, *((path, unread_reason(path)) for path in dataset.scan.unread)])


def list_images(root: Path) -> FolderLayout:
    """The images under `root` in its layout, each file checked (the project's image scan): unreadable ones are
    skipped and listed. Labels are indices into the train split's sorted class names."""
    if (root / "train").is_dir():
        train = image_folder(root / "train", labelled=False)
        labelled = not isinstance(train, FlatImageFolder)
        classes = list(train.classes) if labelled else None
        splits, read = {"train": readable(train, labelled)}, [train]
        if (root / "val").is_dir():
            val = image_folder(root / "val", labelled=labelled)
            if labelled:  # val/ may lack a class: its labels are train/'s indices of the same names
                match_val_classes(train, val)
            splits["val"], read = readable(val, labelled), [train, val]
        return with_loose(FolderLayout("imagenet", classes, splits), read)
    dataset = image_folder(root, labelled=False)
    if isinstance(dataset, FlatImageFolder):
        return FolderLayout("flat", None, {"train": readable(dataset, labelled=False)})
    return with_loose(FolderLayout("classes", list(dataset.classes), {"train": readable(dataset)}), [dataset])


def with_loose(layout: FolderLayout, folders) -> FolderLayout:
    """The layout with its folders' count of (and warnings about) image files beside class folders, left out."""
    layout.loose = sum(folder.scan.loose for folder in folders)
    layout.notes = [note for folder in folders for note in folder.scan.notes]
    return layout


def check_out(out: Path, source: Path) -> None:
    """OUT is a folder, or new, outside SOURCE (inside, it would be read as a class folder next time)."""
    if out.resolve() == source.resolve() or source.resolve() in out.resolve().parents:
        raise OutputError(f"output folder '{out}' lies inside the source '{source}'; write the shards elsewhere.")
    if out.exists() and not out.is_dir():
        raise OutputError(f"output '{out}' is a file; give a folder for the shards.")


def check_empty(out: Path, force: bool) -> None:
    """OUT is new or empty (but for its lock), or `force` lets an earlier shard set there be replaced."""
    if out.is_dir() and any(item.name != LOCK_FILE for item in out.iterdir()) and not force:
        raise OutputError(
            f"output folder '{out}' is not empty; choose a new folder, or replace an earlier shard set "
            f"there with --force."
        )


def clear_out(out: Path) -> None:
    """OUT made, and an earlier shard set in it (manifest.json, train-/val-*.tar) removed; nothing else is."""
    out.mkdir(parents=True, exist_ok=True)
    for old in [out / MANIFEST, *(p for split in SPLITS for p in out.glob(f"{split}-*.tar"))]:
        if old.is_symlink() or old.is_file():
            old.unlink()


def write_failed(out: Path, name, err: OSError) -> OutputError:
    """A write to OUT failed (a full disk, a quota): the partial shard set is removed, so it takes no room and the
    same command runs again as it is."""
    for partial in [*(p for split in SPLITS for p in out.glob(f"{split}-*.tar")), *out.glob(f".{MANIFEST}.*")]:
        with contextlib.suppress(OSError):
            partial.unlink()
    full = err.errno in (errno.ENOSPC, errno.EDQUOT)
    return OutputError(
        f"cannot write '{name}': {err.strerror or err}; the shards written so far were removed, so '{out}' holds no "
        f"shard set. {'Free some space (or choose another OUT)' if full else 'Choose another OUT'}, then run the "
        f"same command again."
    )


def image_bytes(path: str) -> bytes:
    """The file's bytes; DataError where it can no longer be read (it could when the source was scanned)."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise DataError(
            f"image '{path}' could be read when the source was scanned but no longer: {err.strerror or err}; "
            f"restore it or remove it, then run the same command with --force."
        ) from None


def extension(path: str) -> str:
    """The member's extension: the file's lowercased suffix, jpeg written jpg (webdataset's decoders' name)."""
    ext = Path(path).suffix.lower().lstrip(".")
    return "jpg" if ext == "jpeg" else ext


def pack_split(out: Path, split: str, samples, shard_size: int, root: Path) -> dict:
    """Write one split's samples in order into shards of `shard_size`, each with its path relative to `root`; its
    manifest entry (skipped filled later)."""
    wds = require("webdataset", "wds", "writing shards")
    names = []
    pattern = str(out / f"{split}-").replace("%", "%%") + "%06d.tar"
    # count-sized shards (no size cap), the bytes as given (no encoder), a fixed mtime: the same input packs the
    # same tar files
    writer = None
    try:
        writer = wds.ShardWriter(
            pattern,
            maxcount=shard_size,
            maxsize=float("inf"),
            verbose=0,
            encoder=False,
            mtime=0.0,
            post=lambda name: names.append(Path(name).name),
        )
        with writer:
            for n, (path, label) in enumerate(samples):
                sample = {"__key__": f"{n:08d}", extension(path): image_bytes(path)}
                sample["path.txt"] = os.fsencode(os.path.relpath(path, root))  # the name's own bytes, UTF-8 or not
                if label is not None:
                    sample["cls"] = str(label).encode("ascii")
                writer.write(sample)
    except OSError as err:  # tarfile names no file: the shard being written is the one
        raise write_failed(out, getattr(writer, "fname", None) or err.filename or pattern % 0, err) from None
    full, rest = divmod(len(samples), shard_size)
    counts = [shard_size] * full + ([rest] if rest else [])
    assert len(counts) == len(names), (counts, names)
    return {"shards": names, "counts": counts, "images": len(samples), "skipped": []}


def write_manifest(out: Path, manifest: dict) -> None:
    """OUT/manifest.json, last and whole (by rename): a manifest always describes finished shards."""
    temporary = out / f".{MANIFEST}.{os.getpid()}"
    try:
        temporary.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, out / MANIFEST)
    except OSError as err:
        raise write_failed(out, out / MANIFEST, err) from None


def write_shards(
    source, out, shard_size: int = 1000, shuffle: bool = True, seed: int = 0, force: bool = False, echo=None, hold=None
) -> ShardSummary:
    """Pack SOURCE (an ImageFolder tree with train/ and val/, a folder of class folders, all of it train, or a
    flat folder of unlabelled images; "sample": the embedded images) into OUT's shards and manifest.json. With
    `shuffle` the images of each split are packed in an order seeded by `seed` (a shard then holds a mix of
    classes), else in the folder's order. `echo(line)` hears of each split as it starts. `hold(out)`, a context
    manager (the CLI's lock on OUT), is held from OUT's emptiness check to its manifest, so that two writers never
    mix their shards in one folder."""
    require("webdataset", "wds", "writing shards")  # before anything is checked or written
    root = source_folder(source)
    out = Path(out).expanduser()
    check_out(out, root)  # before the lock makes OUT
    with hold(out) if hold else contextlib.nullcontext():
        check_empty(out, force)  # before the scan: a refused OUT costs no time
        layout = list_images(root)
        for note in layout.notes if echo else ():  # before the packing, which can take long
            echo(note)
        clear_out(out)  # after it: a source that cannot be read leaves OUT as it was
        # the source absolute: a warning names a sample's file by it joined with the sample's path.txt
        manifest = {"format": FORMAT, "source": str(root.resolve()), "classes": layout.classes, "splits": {}}
        for split, images in layout.splits.items():
            samples = list(images.samples)
            if shuffle:
                random.Random(f"{seed}/{split}").shuffle(samples)
            if echo:
                shards = -(-len(samples) // shard_size)
                images_word = "image" if len(samples) == 1 else "images"
                echo(f"packing {split}: {len(samples)} {images_word} into {shards} shard{'s' if shards > 1 else ''}...")
            skipped = [f"{path}: {why}" for path, why in images.skipped]
            manifest["splits"][split] = {**pack_split(out, split, samples, shard_size, root), "skipped": skipped}
        write_manifest(out, manifest)
        size = sum((out / name).stat().st_size for split in manifest["splits"].values() for name in split["shards"])
    skipped = [pair for images in layout.splits.values() for pair in images.skipped]
    return ShardSummary(out, manifest, layout.kind, size, skipped, layout.loose)
