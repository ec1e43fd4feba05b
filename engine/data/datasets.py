"""Image sources by name: the embedded sample, synthetic noise, an ImageFolder tree or a CIFAR-10 folder.

Every source yields (PIL image, label); `AugmentedImages` turns them into uint8 HWC arrays.
"""

import importlib
import os
import pickle
from contextlib import contextmanager, nullcontext
from importlib.resources import files
from pathlib import Path

import torch
from torch.utils.data import Dataset, Subset
from torchvision import datasets
from torchvision.datasets.utils import check_integrity

from pretexts.engine.data.image_check import (
    UNREAD_EXTENSIONS,
    class_layout_note,
    keep_readable,
    load_rgb,
    loose_images_note,
    stray_folders_error,
)
from pretexts.errors import DataError

SAMPLE_DIR = Path(str(files("pretexts.engine") / "data" / "sample_data"))
IMAGE_EXTENSIONS = datasets.folder.IMG_EXTENSIONS
# what --data takes, as its errors list it
ACCEPTED_DATA = (
    "a folder with train/ and val/ class folders, a folder of class folders, a folder of images (pretraining), shards "
    "(a `pretexts shard` folder, a .tar file or brace pattern of them, or a folder of .tar or .parquet files), a "
    "CIFAR-10 folder, 'sample' or 'synthetic'"
)
# what macOS's Archive Utility adds to a zip: AppleDouble stubs ('._NAME'), never images; not read as a folder of them
METADATA_FOLDERS = ("__MACOSX",)
HELD_OUT_SEED = 0  # the held-out draw is fixed: --seed varies the initialisation, not the test set


def recorded_spec(spec: str) -> str:
    """`spec` as a run records it: a relative path made absolute, so that the commands which default to a
    checkpoint's data read the images it was trained on from any folder; the built-in names and URLs as given."""
    if spec in ("sample", "synthetic") or "://" in spec or spec.startswith("pipe:") or not spec.strip():
        return spec  # a blank spec is refused as such, not as a missing folder
    return os.path.abspath(os.path.expanduser(spec))


def build_source(
    spec: str,
    split: str,
    img_size: int = 32,
    seed: int = 0,
    labelled: bool = False,
    dataset: str | None = None,
    max_images: int | None = None,
    limit: str = "--max-images",
) -> Dataset | None:
    """The `split` ("train" or "val") of the data named by `spec`; None when it has no such split.

    - "sample": the CIFAR-10 images embedded in the package.
    - "synthetic": torchvision's FakeData (random images), for smoke tests.
    - a folder with train/ and val/ ImageFolder trees (the ImageNet layout);
    - a folder of class folders: 5 % of each class is held out as val, the same draw whatever `seed` and for every
      command, so a probe's val images are those pretraining held out (`held_out_split`);
    - a flat folder of unlabelled images (pretraining only, `labelled` False): 5 % held out, the same way;
    - a folder holding torchvision's `cifar-10-batches-py`;
    - with `dataset`, a timm `create_dataset` name (torch/cifar100, hfds/...) whose files lie in `spec`;
    - shards (WebDataset tars, Hugging Face parquet; engine.data.streams): the split's first `max_images` images
      (pretraining streams its training split instead: engine.data.stream_inputs.training_stream).
    """
    if not str(spec).strip():  # Path("") is the current folder, which a user never means
        raise DataError(
            "data must not be empty (it would read the current folder); give a folder of images, shards, "
            "'sample' or 'synthetic'."
        )
    if dataset:
        return timm_dataset(dataset, spec, split)
    from pretexts.engine.data.streams import is_stream  # the readers load only for shards

    if is_stream(spec):
        from pretexts.engine.data.stream_inputs import HEAD_IMAGES, stream_head

        return stream_head(spec, split, max_images or HEAD_IMAGES, labelled, limit)
    if spec == "sample":
        return image_folder(SAMPLE_DIR / split, img_size)
    if spec == "synthetic":
        return datasets.FakeData(
            size=512 if split == "train" else 64,
            image_size=(3, img_size, img_size),
            num_classes=10,
            random_offset=0 if split == "train" else 10_000,
        )
    root = Path(spec).expanduser()
    if not root.exists():
        raise DataError(f"data path '{spec}' does not exist; give {ACCEPTED_DATA}.")
    if not root.is_dir():  # a list of image paths (.txt, .csv) too: it gets the forms --data takes
        raise DataError(f"data path '{spec}' is a file, and lists of image paths are not read; give {ACCEPTED_DATA}.")
    if (root / "cifar-10-batches-py").is_dir():
        return cifar10(root, split)
    if (root / "train").is_dir():
        return image_folder(root / split, img_size, labelled) if (root / split).is_dir() else None
    folder = image_folder(root, img_size, labelled)
    # one draw for every command: a probe's val images are the ones pretraining held out, whatever --seed
    return held_out_split(folder, split, HELD_OUT_SEED, by_class=not isinstance(folder, FlatImageFolder))


def cifar10(root: Path, split: str) -> datasets.CIFAR10:
    """torchvision's CIFAR-10 from root/cifar-10-batches-py; DataError naming the folder and its first missing
    or damaged file (torchvision checks every file's MD5) instead of torchvision's RuntimeError."""
    try:
        return datasets.CIFAR10(str(root), train=split == "train", download=False)
    except (RuntimeError, OSError, EOFError, ValueError, KeyError, IndexError, pickle.UnpicklingError) as err:
        folder = root / datasets.CIFAR10.base_folder
        files = (
            datasets.CIFAR10.train_list
            + datasets.CIFAR10.test_list
            + [[datasets.CIFAR10.meta["filename"], datasets.CIFAR10.meta["md5"]]]
        )
        bad = [
            ("missing" if not (folder / name).is_file() else "damaged (wrong checksum)", name)
            for name, md5 in files
            if not check_integrity(str(folder / name), md5)
        ]
        more = f" (and {len(bad) - 1} more of its {len(files)} files)" if len(bad) > 1 else ""
        why = f"{bad[0][1]} is {bad[0][0]}{more}" if bad else " ".join(str(err).split())[:160]
        raise DataError(
            f"CIFAR-10 folder '{folder}' cannot be read: {why}; download it again (torchvision's "
            f"CIFAR10(root, download=True) on a machine online) or remove the folder."
        ) from None


def image_folder(root: Path, img_size: int = 0, labelled: bool = True) -> datasets.ImageFolder:
    """An ImageFolder of the readable images under `root`; `dataset.scan` lists the skipped ones. Unlabelled,
    a folder whose images lie directly in it is one class. Images lying directly in a folder that also has class
    folders are not used (ImageFolder's layout): `dataset.scan` counts them and notes it, as it notes class folders
    named like splits or holding their images only in subfolders (`class_layout_note`). Loose images beside
    subfolders that hold no more readable ones and cannot be classes (one holds none) are named as the cause of the
    refusal (`keep_readable`), as `held_out_split` names them where the subfolders are too small to hold an image out.
    A `__MACOSX` folder is not read (`METADATA_FOLDERS`)."""
    try:
        dataset = ImageTree(str(root), loader=load_rgb, allow_empty=True)
    except FileNotFoundError:  # no class folder at all
        loose = root.is_dir() and any(p.suffix.lower() in IMAGE_EXTENSIONS for p in root.iterdir())
        if loose and not labelled:
            return keep_readable(FlatImageFolder(str(root), loader=load_rgb), root, img_size)
        if loose:
            raise DataError(
                f"no class folders under '{root}': its images lie directly in it, without labels; labelled data "
                f"needs class folders such as {root / 'cats'} (the ImageNet layout)."
            ) from None
        raise DataError(
            f"no images found under '{root}': expected class folders holding {', '.join(IMAGE_EXTENSIONS)} files "
            f"(the ImageNet layout)."
        ) from None
    loose = [path for path in image_files(str(root), recursive=False) if os.path.isfile(path)]
    layout = class_layout_note(root, dataset.classes, dataset.samples, labelled)  # before unreadable files drop out
    dataset = keep_readable(dataset, root, img_size, loose=len(loose), labelled=labelled)
    if loose:
        dataset.scan.loose = len(loose)
        dataset.scan.notes.append(loose_images_note(root, len(loose), dataset.classes))
    if layout:
        dataset.scan.notes.append(layout)
    return dataset


class ImageTree(datasets.ImageFolder):
    """torchvision's ImageFolder whose walk follows links but visits each real folder and file once: a link
    back up the tree (a loop) would list every image again at each of the 40 levels the OS follows. A `__MACOSX`
    folder is no class."""

    def find_classes(self, directory):
        classes = [name for name in datasets.folder.find_classes(directory)[0] if name not in METADATA_FOLDERS]
        if not classes:
            raise FileNotFoundError(f"no class folder in {directory}")
        return classes, {name: index for index, name in enumerate(classes)}

    def make_dataset(self, directory, class_to_idx=None, extensions=None, is_valid_file=None, allow_empty=False):
        if class_to_idx is None:
            _, class_to_idx = self.find_classes(directory)
        samples, self.unread = [], []  # unread: photos in formats the loader does not read (image_check)
        for name in sorted(class_to_idx):
            folder = os.path.join(directory, name)
            files = image_files(folder, outside=(os.path.realpath(directory),), unread=self.unread)
            samples += [(path, class_to_idx[name]) for path in files]
        return samples


def image_files(folder: str, recursive: bool = True, outside=(), unread: list | None = None) -> list[str]:
    """The image files under `folder` in ImageFolder's order (folders sorted by path, files by name), following
    links to folders and files, but each real folder and file once: a link to a folder already walked (a loop),
    to one of the `outside` folders (the data root), or to a file already listed is skipped. Files of the photo
    formats the loader does not read (.heic, ...) are added to `unread`, to be reported rather than left out; a
    `__MACOSX` folder is not walked."""
    seen_dirs, walked = set(outside), []

    def walk(path: str) -> None:
        real = os.path.realpath(path)
        if real in seen_dirs:
            return
        seen_dirs.add(real)
        try:
            with os.scandir(path) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:  # an unreadable folder is skipped, as os.walk does
            return
        files, subdirs = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if not (is_dir and entry.name in METADATA_FOLDERS):
                (subdirs if is_dir else files).append(entry)
        walked.append((path, real, files))
        if recursive:
            for entry in subdirs:
                walk(entry.path)

    walk(folder)
    found, seen_files = [], set()
    for path, real, entries in sorted(walked, key=lambda item: item[0]):
        for entry in entries:
            if not entry.name.lower().endswith(IMAGE_EXTENSIONS):
                if unread is not None and entry.name.lower().endswith(UNREAD_EXTENSIONS):
                    unread.append(os.path.join(path, entry.name))
                continue
            target = os.path.realpath(entry.path) if entry.is_symlink() else os.path.join(real, entry.name)
            if target not in seen_files:
                seen_files.add(target)
                found.append(os.path.join(path, entry.name))
    return found


class FlatImageFolder(datasets.ImageFolder):
    """Unlabelled images lying directly in one folder (no class folders), all of class 0: pretraining needs no
    labels."""

    def find_classes(self, directory):
        return ["images"], {"images": 0}

    def make_dataset(self, directory, class_to_idx=None, extensions=None, is_valid_file=None, allow_empty=False):
        self.unread = []
        files = image_files(str(directory), recursive=False, unread=self.unread)
        return [(path, 0) for path in files if os.path.isfile(path)]


def held_out_split(dataset: Dataset, split: str, seed: int, fraction: float = 0.05, by_class: bool = False) -> Subset:
    """A seeded split of a dataset that ships without val/: `fraction` of it, or `by_class` that of each class (at
    least one image of a class of two or more, none of a class of one), the val split noting what it holds."""
    if not by_class:
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed)).tolist()
        n_val = max(1, int(len(dataset) * fraction))
        return Subset(dataset, order[:n_val] if split == "val" else order[n_val:])
    members: dict[int, list[int]] = {}
    for index, label in enumerate(dataset.targets):
        members.setdefault(label, []).append(index)
    generator, val = torch.Generator().manual_seed(seed), []
    for label in sorted(members):
        indices = members[label]
        keep = max(1, round(fraction * len(indices))) if len(indices) > 1 else 0
        val += [indices[i] for i in torch.randperm(len(indices), generator=generator)[:keep].tolist()]
    root = getattr(dataset, "root", "the data")
    loose = getattr(getattr(dataset, "scan", None), "loose", 0)
    if not val and loose >= len(dataset):  # the loose images are the data, the subfolders strays (@eaDir/)
        raise DataError(stray_folders_error(root, loose, dataset.classes, len(dataset)))
    if not val:
        raise DataError(
            f"'{root}' has no val/ folder and each of its class folders holds one image, so none can be held out as "
            f"val; give a folder with train/ and val/ class folders, or more images per class."
        )
    if split == "train":
        held = set(val)
        return Subset(dataset, [i for i in range(len(dataset)) if i not in held])
    if hasattr(dataset, "scan"):  # said as the run starts (image_check.report_skipped)
        dataset.scan.notes.append(
            f"'{root}' has no val/ folder: {len(val)} of its {len(dataset)} images ({fraction * 100:g} % of each "
            f"of its {len(members)} class folders, the same draw whatever --seed) are held out as val; to choose "
            f"them, give a folder with train/ and val/ class folders."
        )
    return Subset(dataset, sorted(val))


STREAMS = ("tfds/", "wds/", "hfids/")  # iterable datasets: no index, so no exact resume


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


@contextmanager
def hub_offline():
    """Hugging Face `datasets` and the Hub kept offline for the call (timm's hfds reader would download what the
    cache lacks): the variables set, and the flags they were read into at import, then all put back."""
    flags = []
    for module in ("huggingface_hub.constants", "datasets.config"):  # imported first: they read the variables
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            continue
        flags += [(loaded, name, getattr(loaded, name)) for name in OFFLINE_VARIABLES if hasattr(loaded, name)]
    saved_env = {name: os.environ.get(name) for name in OFFLINE_VARIABLES}
    os.environ.update(dict.fromkeys(OFFLINE_VARIABLES, "1"))
    for loaded, name, _ in flags:
        setattr(loaded, name, True)
    try:
        yield
    finally:
        for loaded, name, value in flags:
            setattr(loaded, name, value)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def timm_dataset(name: str, root: str, split: str) -> Dataset:
    """timm's `create_dataset(name, root)`, map-style only (a resumed run starts at an exact index), never
    downloading: the files must already be in `root`."""
    from timm.data import create_dataset

    if name.startswith(STREAMS):
        raise DataError(
            f"dataset '{name}' is timm's streaming reader, which cannot resume at the exact image; give the "
            f"shards to --data instead (a folder or brace pattern of WebDataset .tar files, or a folder of "
            f"parquet files: pretexts streams them with exact resume), or a map-style dataset (torch/..., hfds/...)."
        )
    try:
        with hub_offline() if name.startswith("hfds/") else nullcontext():
            return create_dataset(
                name, root=root, split="train" if split == "train" else "validation", download=False, is_training=False
            )
    # OSError: the Hub's ConnectionError when the cache lacks the data set (offline, it asks no server)
    except (RuntimeError, OSError, ValueError, AssertionError, ImportError) as err:
        raise DataError(
            f"timm dataset '{name}' cannot be read from '{root}' ({' '.join(str(err).split())[:160]}); "
            f"put its files there first (nothing is downloaded), e.g. with {how_to_fetch(name, root)} on a machine "
            f"online."
        ) from None


def how_to_fetch(name: str, root: str) -> str:
    if name.startswith("hfds/"):
        return f"datasets.load_dataset({name[len('hfds/') :]!r}, cache_dir={root!r})"
    return "torchvision's download=True"
