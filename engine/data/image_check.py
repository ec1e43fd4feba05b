"""Read any image file as 8-bit RGB, and find the files that cannot be read before training starts.

The scan opens each file and runs PIL's `verify` (header, and the chunk checksums of a PNG): cheap,
about 0.05 ms a file, so it runs on every start. It cannot see a JPEG truncated in its pixel data;
such a file fails when it is decoded, and `read_or_substitute` then reports it and serves the next
readable image, so one bad file never stops a long run.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from pretexts.engine.data.warn_once import WarnOnce
from pretexts.errors import DataError

SKIPPED_FILE = "skipped_images.txt"
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


@dataclass
class ImageScan:
    """The readable files, the unreadable ones with the reason, and how many are below the crop size."""

    good: list[str] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)
    small: list[str] = field(default_factory=list)
    min_side: int = 0


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


def load_rgb(path: str) -> Image.Image:
    """The ImageFolder loader: any image as 8-bit RGB, or DataError naming the file."""
    try:
        with Image.open(path) as image:
            return to_rgb(image)
    except Exception as err:  # PIL raises many types (OSError, SyntaxError, ValueError) for bad files
        raise DataError(f"image '{path}' cannot be read: {reason(err)}.") from None


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


def keep_readable(dataset, root: Path, min_side: int = 0):
    """Drop an ImageFolder's unreadable files (kept in `dataset.scan`); DataError for an empty class
    folder, or when no file can be read."""
    counts = dict.fromkeys(dataset.classes, 0)
    for _, label in dataset.samples:
        counts[dataset.classes[label]] += 1
    empty = [str(root / name) for name, count in counts.items() if count == 0]
    if empty:
        raise DataError(f"no images found in class folder {', '.join(empty)}; add images or remove the folder.")
    dataset.scan = scan_images([path for path, _ in dataset.samples], min_side)
    if not dataset.scan.good:
        shown = "; ".join(f"{Path(p).name}: {why}" for p, why in dataset.scan.bad[:3])
        raise DataError(
            f"none of the {len(dataset.scan.bad)} image files under '{root}' can be read ({shown}); check the files."
        )
    good = set(dataset.scan.good)
    dataset.samples = dataset.imgs = [s for s in dataset.samples if s[0] in good]
    dataset.targets = [label for _, label in dataset.samples]
    return dataset


def read_or_substitute(source, index: int, warn: WarnOnce, tries: int = 16):
    """source[index]; an image that fails to decode is reported (once per file through `warn`, the dataset's) and
    the next one is served instead (deterministically, so a resumed run sees the same data). The split keeps its
    length, so the next image is read twice: the warning says so, as it changes what a val count and its top-1 are
    made of."""
    for offset in range(tries):
        position = (index + offset) % len(source)
        try:
            return source[position]
        except DataError as err:
            warn(str(position), f"{err} Using the next image instead (it counts twice).")
    raise DataError(f"{tries} images in a row from index {index} cannot be read; check the data folder.")


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
    notes = []
    if bad:
        write_text(out / SKIPPED_FILE, "".join(f"{path}\t{why}\n" for path, why in bad.items()))
        shown = "; ".join(f"{Path(path).name}: {why}" for path, why in list(bad.items())[:3])
        more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
        notes.append(f"skipped {len(bad)} unreadable images (see {out / SKIPPED_FILE}): {shown}{more}.")
    else:
        (out / SKIPPED_FILE).unlink(missing_ok=True)
    few = {path for scan in scans for path in scan.small} if small else set()
    if few:
        notes.append(f"{len(few)} images are smaller than {scans[0].min_side} px; the random crop upscales them.")
    return " ".join(notes) or None
