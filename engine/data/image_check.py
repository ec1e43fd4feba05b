"""Read any image file as 8-bit RGB, and find the files that cannot be read before training starts.

The scan opens each file and runs PIL's `verify` (header, and the chunk checksums of a PNG): cheap,
about 0.05 ms a file, so it runs on every start. It cannot see a JPEG truncated in its pixel data;
such a file fails when it is decoded, and `read_or_substitute` (a folder's) or `decode_or_substitute` (a shard's)
then reports it and serves the next readable image, so one bad file never stops a long run; `list_decode_failures`
adds it to OUT/skipped_images.txt.
"""

import io
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError
from torchvision.datasets.folder import IMG_EXTENSIONS

from pretexts.engine.data.warn_once import WarnOnce
from pretexts.errors import DataError
from pretexts.shown_text import escape_controls

SKIPPED_FILE = "skipped_images.txt"
SUBSTITUTE_TRIES = 16  # an unreadable image's next ones tried before a run of them stops it
TWICE = "Using the next image instead (it counts twice)."
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
# other photo and image formats a folder may hold: listed as skipped rather than left out without a word
UNREAD_EXTENSIONS = (".heic", ".heif", ".avif", ".jxl", ".jp2", ".gif", ".dng", ".cr2", ".nef", ".arw", ".raw", ".psd")


@dataclass
class ImageScan:
    """The readable files, the unreadable ones with the reason, and how many are below the crop size."""

    good: list[str] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)
    small: list[str] = field(default_factory=list)
    min_side: int = 0
    unread: list[str] = field(default_factory=list)  # files of photo formats the loader does not read (.heic, ...)
    loose: int = 0  # image files lying directly in the root beside its class folders: not used
    notes: list[str] = field(default_factory=list)  # what the run should say at its start (unused files, a split)
    root: str = ""  # the folder scanned, which the report names the files relative to


def to_rgb(image: Image.Image) -> Image.Image:
    """8-bit RGB from any PIL mode.

    16-bit images are scaled (65535 -> 255); PIL's own convert clips them, turning most pixels white.
    Mode "I" is read as 16-bit too, since Pillow opens 16-bit PNG and TIFF files so. Float ("F")
    images are read as [0, 1]. Transparent pixels are composited over white, not dropped to the
    colour stored under them (often black, which masking tasks use as their blank).
    """
    if image.mode in SIXTEEN_BIT_MODES:
        gray = np.asarray(image, dtype=np.float64) / 257
        return Image.fromarray(np.clip(np.round(gray), 0, 255).astype(np.uint8)).convert("RGB")
    if image.mode == "F":
        gray = np.asarray(image, dtype=np.float64) * 255
        return Image.fromarray(np.clip(np.round(gray), 0, 255).astype(np.uint8)).convert("RGB")
    if "A" in image.getbands() or "transparency" in image.info:
        rgba = image.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, "white"), rgba).convert("RGB")
    return image.convert("RGB")


def reason(err: Exception) -> str:
    """A short cause without the path, which the report already shows."""
    if isinstance(err, UnidentifiedImageError):
        return "cannot identify image file (not an image?)"
    return str(err) or type(err).__name__


def upright(image: Image.Image) -> Image.Image:
    """The image turned as its EXIF Orientation tag says (phone photos are stored sideways with one), in place;
    an EXIF block that cannot be parsed leaves the image as stored rather than making it unreadable."""
    try:
        ImageOps.exif_transpose(image, in_place=True)
    except Exception:  # noqa: BLE001 - PIL raises many types for a damaged EXIF block
        pass
    return image


class UnreadableImage(DataError):
    """An image file that cannot be decoded, with its path and why (the line OUT/skipped_images.txt gets)."""

    def __init__(self, path: str, why: str):
        super().__init__(f"image '{escaped(path)}' cannot be read: {escaped(why)}.")
        self.path, self.why = path, why

    def __reduce__(self):  # pickled by its fields, as the message alone would not rebuild it
        return type(self), (self.path, self.why)


def load_rgb(path: str) -> Image.Image:
    """The ImageFolder loader: any image, upright, as 8-bit RGB, or UnreadableImage (a DataError) naming the file."""
    try:
        with Image.open(path) as image:
            return to_rgb(upright(image))
    except Exception as err:  # PIL raises many types (OSError, SyntaxError, ValueError) for bad files
        raise UnreadableImage(path, reason(err)) from None


def check_image(path: str) -> tuple[str | None, int]:
    """(why the file cannot be read, or None; its shorter side)."""
    try:
        if os.path.getsize(path) == 0:
            return "empty file (0 bytes)", 0
        with Image.open(path) as image:
            side = min(image.size)
            image.verify()
    except Exception as err:  # noqa: BLE001 - any failure means unreadable
        return reason(err), 0
    return None, side


def scan_images(paths: list[str], min_side: int = 0, threads: int = 8) -> ImageScan:
    """Check every file (threads: the work is mostly file reads); the order of `paths` is kept."""
    scan = ImageScan(min_side=min_side)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for path, (why, side) in zip(paths, pool.map(check_image, paths, chunksize=64)):
            if why is None:
                scan.good.append(path)
                if side < min_side:
                    scan.small.append(path)
            else:
                scan.bad.append((path, why))
    return scan


def keep_readable(dataset, root: Path, min_side: int = 0, loose: int = 0, labelled: bool = True):
    """Drop an ImageFolder's unreadable files (kept in `dataset.scan`). DataError for `loose` images (lying directly
    in `root`) beside subfolders that hold no more readable ones and cannot be classes (one holds none), for a class
    folder left without a readable image (`no_image_error`: a phantom class otherwise; unlabelled, only one holding
    no image file, since pretraining reads no label and a folder of unreadable files is skipped and listed as any
    such file is), or when no file can be read."""
    dataset.scan = scan_images([path for path, _ in dataset.samples], min_side)
    dataset.scan.root = str(root)
    dataset.scan.unread = list(getattr(dataset, "unread", []))
    good = set(dataset.scan.good)
    readable = [sample for sample in dataset.samples if sample[0] in good]
    filled = {label for _, label in readable}
    if loose and loose >= len(readable) and len(filled) < len(dataset.classes):  # a stray (thumbs/) beside the data
        raise DataError(stray_folders_error(root, loose, dataset.classes, len(readable)))
    if dataset.samples and not readable:
        shown = "; ".join(f"{os.path.relpath(p, root)}: {why}" for p, why in dataset.scan.bad[:3])
        files = f"{len(dataset.scan.bad)} image files under '{root}'"
        raise DataError(escaped(f"none of the {files} can be read ({shown}); check the files."))
    having = filled if labelled else {label for _, label in dataset.samples}
    if len(having) < len(dataset.classes):
        raise DataError(no_image_error(dataset, root, [i for i in range(len(dataset.classes)) if i not in having]))
    dataset.samples = dataset.imgs = readable
    dataset.targets = [label for _, label in dataset.samples]
    return dataset


def no_image_error(dataset, root: Path, empty: list[int]) -> str:
    """The refusal of class folders left without a readable image (`empty`, their labels): those holding no image
    file, all in one line; else why the first other one's files are not used (they cannot be read, or are of a
    format the loader does not read), the rest named after it."""
    why_of, folders = dict(dataset.scan.bad), {label: root / dataset.classes[label] for label in empty}
    bad = {label: [(p, why_of[p]) for p, of in dataset.samples if of == label] for label in empty}
    unread = {label: [p for p in dataset.scan.unread if p.startswith(f"{folders[label]}{os.sep}")] for label in empty}
    first = next((label for label in empty if bad[label] or unread[label]), None)
    if first is None:
        return escaped(
            f"no images found in class folder {', '.join(map(str, folders.values()))}; add images or remove the folder."
        )
    folder, others = folders[first], [dataset.classes[label] for label in empty if label != first]
    also = f" Also without a readable image: {listed_folders(others)}." if others else ""
    if bad[first]:
        files = bad[first]
        shown = "; ".join(f"{os.path.relpath(p, folder)}: {why}" for p, why in files[:3])
        more = f"; and {len(files) - 3} more" if len(files) > 3 else ""
        return escaped(
            f"class folder '{folder}' holds no readable image: its {counted(len(files), 'image file')} cannot be read "
            f"({shown}{more}); replace them, or remove the folder.{also}"
        )
    files = unread[first]
    formats = sorted({Path(p).suffix.lower() for p in files})
    return escaped(
        f"class folder '{folder}' holds no image that is read: its {counted(len(files), 'file')} "
        f"{'is' if len(files) == 1 else 'are'} {', '.join(formats)}, and {not_read(formats)}; convert them to JPEG or "
        f"PNG, or remove the folder.{also}"
    )


def listed_folders(names: list[str], most: int = 3) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(f"{name}/" for name in names[:most]) + more


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def unread_reason(path: str) -> str:
    return f"{not_read([Path(path).suffix.lower()])}; convert it to JPEG or PNG"


def not_read(formats: list[str]) -> str:
    return f"{', '.join(formats)} files are not read (only {', '.join(IMG_EXTENSIONS)} are)"


def loose_images_note(root, count: int, classes: list[str]) -> str:
    """The warning for image files lying directly in a folder beside its class folders: ImageFolder reads only the
    class folders' images, so these are left out."""
    folders = f"class folder '{classes[0]}'" if len(classes) == 1 else f"{len(classes)} class folders"
    files = "image file lies" if count == 1 else "image files lie"
    return escaped(
        f"warning: {count} {files} directly in '{root}' beside its {folders} and {'is' if count == 1 else 'are'} "
        f"not used: only the images inside class folders are. Move them into a folder of their own there, or give "
        f"a folder that holds only them."
    )


def stray_folders_error(root, count: int, classes: list[str], inside: int) -> str:
    """The error for images lying directly in a folder beside subfolders that hold no more images and cannot be read
    as classes (an empty thumbs/, an @eaDir/ too small to hold any image out): the loose images are the data, and the
    subfolders' own error (an empty class folder, no val) would not say why they are left out."""
    more = f" and {len(classes) - 3} more" if len(classes) > 3 else ""
    folders = ", ".join(f"{name}/" for name in classes[:3]) + more
    lie = "lies" if count == 1 else "lie"
    return escaped(
        f"{counted(count, 'image')} {lie} directly in '{root}' beside the folder{'s' if len(classes) > 1 else ''} "
        f"{folders} (holding {counted(inside, 'image') if inside else 'no image'}), which makes it a tree of class "
        f"folders whose loose images are not read; move {folders} out of it, or put the images in class folders."
    )


SPLIT_NAMES = ("train", "training", "val", "validation", "test")


def class_layout_note(root, classes: list[str], samples: list[tuple[str, int]], labelled: bool) -> str | None:
    """One warning for class folders that look like a mistake (they are still read, as ImageFolder reads them):
    folders named like splits (segment's training/ and validation/ given to a classifier), else (labelled data)
    class folders whose images all lie in subfolders, which are then read as one class."""
    splits = [name for name in classes if name.lower() in SPLIT_NAMES]
    if splits:
        named = ", ".join(f"{name}/" for name in splits)
        return escaped(
            f"warning: the folders {named} of '{root}' are named like splits but are read as class folders (of "
            f"{len(classes)} classes); a train/val split is two folders named train/ and val/, each holding the "
            f"class folders."
        )
    if not labelled:
        return None
    folders = [os.path.join(str(root), name) for name in classes]
    direct = {label for path, label in samples if os.path.dirname(path) == folders[label]}
    nested = [label for label in range(len(classes)) if label not in direct]
    if not nested:
        return None
    first = nested[0]
    below = [os.path.relpath(path, folders[first]) for path, label in samples if label == first]
    inner = dict.fromkeys(relative.split(os.sep)[0] for relative in below)
    shown = ", ".join(f"{name}/" for name in list(inner)[:3]) + (", ..." if len(inner) > 3 else "")
    more = f" (and {len(nested) - 1} more class folders)" if len(nested) > 1 else ""
    return escaped(
        f"warning: class folder '{classes[first]}'{more} of '{root}' holds no images directly, only in its "
        f"subfolders ({shown}), which are all read as the one class '{classes[first]}'; if those subfolders are "
        f"the classes, give --data {folders[first]}."
    )


def read_or_substitute(source, index: int, warn: WarnOnce, tries: int = SUBSTITUTE_TRIES):
    """source[index]; an image that fails to decode is reported (once per file through `warn`, the dataset's) and
    the next one is served instead (deterministically, so a resumed run sees the same data). The split keeps its
    length, so the next image is read twice: the warning says so, as it changes what a val count and its top-1 are
    made of."""
    for offset in range(tries):
        position = (index + offset) % len(source)
        try:
            return source[position]
        except DataError as err:
            listed = f"{escaped(err.path)}\t{escaped(err.why)}" if isinstance(err, UnreadableImage) else ""
            warn(str(position), escaped(f"{err} {TWICE}"), listed)
    raise DataError(f"{tries} images in a row from index {index} cannot be read; check the data folder.")


def decode(sample) -> Image.Image:
    """A shard's sample (`streams.RawSample`: its image's bytes, or the path of its file) as upright 8-bit RGB."""
    data = sample.data
    if data is None:
        raise ValueError("the sample holds no image")
    if isinstance(data, str):
        if not Path(data).is_file():  # a FIFO or a device would block the reader, a folder fail obscurely
            raise ValueError(f"'{data}' is not a regular file")
        data = Path(data).read_bytes()
    with Image.open(io.BytesIO(data)) as image:
        return to_rgb(upright(image))


def decode_or_substitute(sample, neighbours: Callable[[], list], warn: WarnOnce) -> tuple[Image.Image, object]:
    """(image, the sample it came from) of a shard's `sample`; an unreadable one is reported once (through `warn`),
    named by the file it was packed from where the shard records it, and the next readable sample is served."""

    def candidates():  # the neighbours are listed only when the sample itself fails
        yield sample
        yield from neighbours()[: SUBSTITUTE_TRIES - 1]

    for candidate in candidates():
        try:
            return decode(candidate), candidate
        except Exception as err:  # noqa: BLE001 - PIL raises many types for bad bytes
            source = f" (from '{candidate.source}')" if candidate.source else ""
            said = f"image {candidate.key}{source} of shard '{candidate.shard}' cannot be read: {reason(err)}. {TWICE}"
            listed = escaped(candidate.source or f"{candidate.shard}:{candidate.key}") + f"\t{escaped(reason(err))}"
            warn(f"{candidate.shard}\t{candidate.key}", escaped(said), listed)  # listed in OUT/skipped_images.txt
    where = f"{sample.key} of '{sample.shard}'"
    raise DataError(escaped(f"{SUBSTITUTE_TRIES} images in a row from {where} cannot be read."))


def find_scan(dataset) -> ImageScan | None:
    """The scan behind a dataset, looking through Subset and AugmentedImages wrappers."""
    while dataset is not None and not isinstance(getattr(dataset, "scan", None), ImageScan):
        dataset = getattr(dataset, "dataset", None) or getattr(dataset, "source", None)
    return None if dataset is None else dataset.scan


def report_skipped(datasets, out: Path, write_text, small: bool = True) -> str | None:
    """Write OUT/skipped_images.txt (each unreadable file's path and why, one a line) with `write_text(path, text)`
    (the run folder's, by rename: never through a link in OUT) and return a one-line note, or None when every
    image is fine; then the file an earlier run left there is removed (its list is not this run's).
    `small`: also count the images below the scan's crop size (pretraining's random crop upscales them)."""
    scans = [s for s in map(find_scan, datasets) if s is not None]
    bad = dict(pair for scan in scans for pair in scan.bad)  # the train and val splits may share files
    unread = list(dict.fromkeys(path for scan in scans for path in scan.unread))
    notes = list(dict.fromkeys(note for scan in scans for note in scan.notes))  # both splits may name one folder
    if bad or unread:
        listed = {**bad, **{path: unread_reason(path) for path in unread}}
        write_text(out / SKIPPED_FILE, "".join(f"{escaped(path)}\t{escaped(why)}\n" for path, why in listed.items()))
    else:
        (out / SKIPPED_FILE).unlink(missing_ok=True)
    if bad:
        base = data_root([scan.root for scan in scans])
        shown = "; ".join(
            f"{os.path.relpath(path, base) if base else path}: {why}" for path, why in list(bad.items())[:3]
        )
        more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
        under = f" under '{base}'" if base else ""
        notes.append(
            f"skipped {counted(len(bad), 'unreadable image')}{under} (see {out / SKIPPED_FILE}): {shown}{more}."
        )
    if unread:
        formats = ", ".join(sorted({Path(path).suffix.lower() for path in unread}))
        notes.append(
            f"left out {counted(len(unread), 'file')} of formats not read ({formats}; listed in {out / SKIPPED_FILE}): "
            f"convert them to JPEG or PNG."
        )
    few = {path for scan in scans for path in scan.small} if small else set()
    if few:
        are = "image is" if len(few) == 1 else "images are"
        notes.append(f"{len(few)} {are} smaller than {scans[0].min_side} px; the random crop upscales them.")
    return escaped(" ".join(notes)) or None


def data_root(roots: list[str]) -> str | None:
    """The folder the scanned roots share (the data folder above its train/ and val/), or None where there is none."""
    try:
        return os.path.commonpath(roots) if roots else None
    except ValueError:  # absolute and relative roots, or roots on different drives
        return None


def find_warnings(dataset) -> list[WarnOnce]:
    """The WarnOnce objects of a dataset and of those it wraps (Subset, AugmentedImages, LabelledImages, a stream)."""
    found = []
    while dataset is not None:
        if isinstance(getattr(dataset, "warn", None), WarnOnce):
            found.append(dataset.warn)
        wrapped = getattr(dataset, "dataset", None)
        dataset = wrapped if wrapped is not None else getattr(dataset, "source", None)
    return found


def list_decode_failures(datasets, out: Path, write_text) -> int:
    """Add to OUT/skipped_images.txt (`report_skipped`'s, written the same way) the files that the start-up scan
    passed but that failed when decoded, as the datasets' warnings (in any loader worker) recorded them; returns how
    many were added. Called after `report_skipped` (which starts the file afresh) each epoch and as a run ends."""
    records = [line for dataset in datasets for warn in find_warnings(dataset) for line in warn.records()]
    found = dict(line.split("\t", 1) for line in sorted(records) if "\t" in line)
    if not found:
        return 0
    path = out / SKIPPED_FILE
    try:  # as write_text left it: a name that is not UTF-8 is escaped there (\udcff)
        text = "" if path.is_symlink() else path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        text = ""
    listed = {line.split("\t", 1)[0] for line in text.splitlines()}
    new = {name: why for name, why in found.items() if escaped(name) not in listed}
    if new:
        write_text(path, text + "".join(f"{escaped(name)}\t{escaped(why)}\n" for name, why in new.items()))
    return len(new)


def escaped(text: str) -> str:
    """`text` safe to print and to write one record a line (`escape_controls`)."""
    return escape_controls(text)
