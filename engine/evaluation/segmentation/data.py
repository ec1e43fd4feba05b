"""Segmentation folders: ADE20K (images/ + annotations/, 150 classes, 0 = ignore) and generic (images/ + masks/)."""

from pathlib import Path

import albumentations as A
import numpy as np
import torch
from PIL import Image

from pretexts.backbones.normalisation import IMAGENET_MEAN, IMAGENET_STD
from pretexts.engine.data.image_check import reason, to_rgb, upright
from pretexts.engine.data.loader import ANTIALIAS, image_seed
from pretexts.errors import DataError

from .metrics import IGNORE

SUFFIXES = {".jpg", ".jpeg", ".png"}
SPLITS = ("training", "validation")


def refuse_shards(data: str) -> None:
    """DataError for shards (engine.data.streams): they hold images and class labels, no masks."""
    from pretexts.engine.data.streams import is_stream  # the readers load only for shards

    if is_stream(data):
        raise DataError(
            f"'{data}' names shards, which hold no masks: segmentation reads image + mask folders (ADE20K's "
            f"images/ + annotations/, or images/ + masks/); give such a folder, or --data generated."
        )


def layout(root: str | Path) -> tuple[str, Path, Path]:
    """('ade20k' | 'generic', images dir, masks dir) of a folder; DataError naming what is missing."""
    refuse_shards(str(root))
    if not str(root).strip():
        raise DataError("--data must not be empty (it would read the current folder); give a segmentation folder.")
    root = Path(root)
    if (root / "annotations").is_dir():
        return "ade20k", root / "images", root / "annotations"
    if (root / "masks").is_dir():
        return "generic", root / "images", root / "masks"
    # `--data generated` makes a set for the run alone (a temporary folder), so it is offered, not "written"
    raise DataError(
        f"'{root}' is neither ADE20K (images/ + annotations/) nor generic (images/ + masks/), each with "
        f"training/ and validation/ subfolders; give such a folder, or --data generated for a small built-in set."
    )


def is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SUFFIXES


def pairs(images: Path, masks: Path, split: str) -> list[tuple[Path, Path]]:
    found = sorted(p for p in (images / split).glob("*") if is_image(p))
    if not found:
        # the layout is said in full: a flat images/ (no split subfolders) is the usual cause
        expected = (
            f"images go in {images.name}/{SPLITS[0]}/ and {images.name}/{SPLITS[1]}/, their masks (same name, "
            f".png) in {masks.name}/{SPLITS[0]}/ and {masks.name}/{SPLITS[1]}/"
        )
        flat = any(is_image(p) for p in images.glob("*"))
        where = f"; '{images}' holds its images directly: move them into these subfolders" if flat else ""
        raise DataError(f"no images in '{images / split}': {expected}{where}.")
    out = []
    for img in found:
        mask = masks / split / (img.stem + ".png")
        if not mask.is_file():
            raise DataError(f"image '{img}' has no mask '{mask}'.")
        out.append((img, mask))
    return out


def read_image(path: Path) -> Image.Image:
    """The image as 8-bit RGB as pretraining reads it (`upright`: turned as its EXIF Orientation says; `to_rgb`:
    16-bit scaled, not clipped to white; transparency over white), or a DataError naming it: a bad file ends the run
    in one line, as a bad mask does. Masks are read as stored (PNG, no EXIF), as mmsegmentation reads them."""
    try:
        with Image.open(path) as image:
            return to_rgb(upright(image))
    except Exception as err:  # noqa: BLE001 - PIL raises many types (OSError, SyntaxError, ValueError) for bad files
        raise DataError(
            f"image '{path}' is unreadable ({reason(err)}); replace it with a readable image, or remove it."
        ) from None


def open_mask(path: Path) -> np.ndarray:
    """The mask's pixels, or a DataError naming it (removed alone, it would leave its image without a mask)."""
    try:
        with Image.open(path) as mask:
            return np.array(mask)
    except Exception as err:  # noqa: BLE001 - as read_image
        raise DataError(
            f"mask '{path}' is unreadable ({reason(err)}); replace it with a readable mask, or remove it and its image."
        ) from None


def read_mask(path: Path, size: tuple[int, int], kind: str, num_classes: int | None) -> np.ndarray:
    """Labels 0..C-1 and IGNORE; ADE20K's 0 and 255 become IGNORE and the rest shift down (reduce_zero_label)."""
    mask = open_mask(path)
    if mask.ndim != 2 or mask.shape != size[::-1]:
        raise DataError(
            f"mask '{path}' is {mask.shape}, its image is {size[::-1]}; masks are single-channel and the image's size."
        )
    mask = mask.astype(np.int64)
    if kind == "ade20k":
        # 255 stays ignore, as mmsegmentation's reduce_zero_label keeps it (it would otherwise become class 254)
        mask = np.where((mask == 0) | (mask == IGNORE), IGNORE, mask - 1)
    if num_classes is not None and ((mask != IGNORE) & (mask >= num_classes)).any():
        raise DataError(
            f"mask '{path}' has label {int(mask[mask != IGNORE].max())}, out of range 0..{num_classes - 1}"
            f"; pass the right --num-classes."
        )
    # int32, not uint8: a 16-bit PNG's labels above 255 stay themselves (albumentations' crop keeps int32)
    return mask.astype(np.int32)


MAX_INFERRED_CLASSES = 4096  # ADE20K-full has 3,688; the confusion matrix holds classes² counts


def infer_classes(items: list[tuple[Path, Path]]) -> int:
    """The largest label in the masks + 1; 255, the ignore label everywhere else (VOC's borders), is no class.
    A largest label far above the rest (65535 as a 16-bit mask's "ignore") would size the head and the confusion
    matrix for classes no mask holds, so more than MAX_INFERRED_CLASSES are refused, naming the mask."""
    top, where = 0, None
    for _, path in items:
        labels = without_ignore(open_mask(path))
        if labels.size and int(labels.max()) > top:
            top, where = int(labels.max()), path
    if top + 1 > MAX_INFERRED_CLASSES:
        labels = set().union(*(np.unique(without_ignore(open_mask(m))).tolist() for _, m in items))
        raise DataError(
            f"mask '{where}' has label {top}, so {top + 1} classes would be inferred from masks holding "
            f"{len(labels)} distinct labels; if {top} marks pixels to ignore, write them as 255, the ignore label, "
            f"or pass --num-classes (1..65536) if there are that many classes."
        )
    return top + 1


def without_ignore(mask: np.ndarray) -> np.ndarray:
    return mask[mask != IGNORE]


class SegmentationFolder(torch.utils.data.Dataset):
    """One split; training applies random scale-crop + flip to image and mask together (albumentations).

    Evaluation resizes the image to size x size, or with keep_aspect its short side to size (for sliding windows),
    and keeps the mask at its own size: the prediction is resized back to it to be scored (mmsegmentation's way).
    `mean` and `std` are the backbone's own (`normalisation(backbone)`, what it was pretrained with); ImageNet's,
    timm's default, when not given.
    """

    def __init__(
        self,
        root,
        split: str,
        size: int,
        train: bool,
        num_classes: int | None = None,
        keep_aspect: bool = False,
        seed: int = 0,
        mean: tuple = IMAGENET_MEAN,
        std: tuple = IMAGENET_STD,
    ):
        self.seed, self.train, self.mean, self.std = seed, train, tuple(mean), tuple(std)
        kind, images, masks = layout(root)
        self.kind, self.items = kind, pairs(images, masks, split)
        self.num_classes = num_classes or (150 if kind == "ade20k" else infer_classes(self.items))
        self.classes_from = "given" if num_classes else "ADE20K's" if kind == "ade20k" else "inferred"
        norm = A.Normalize(self.mean, self.std)
        self.transform = A.Compose(
            [
                # the image antialiased when shrunk (pretraining's ANTIALIAS); the mask stays nearest
                A.RandomResizedCrop((size, size), scale=(0.5, 1.0), ratio=(0.75, 1.33), **ANTIALIAS),
                A.HorizontalFlip(),
                norm,
            ]
            if train
            else [
                A.SmallestMaxSize(max_size=size, **ANTIALIAS) if keep_aspect else A.Resize(size, size, **ANTIALIAS),
                norm,
            ]
        )

    def __len__(self):
        return len(self.items)

    def __getitem__(self, key):
        """`key` is an index, or an (epoch, index) key from an `EpochSampler`: the crop and flip are then seeded by
        (seed, epoch, index), the same whatever the number of workers or ranks."""
        epoch, i = key if isinstance(key, tuple) else (None, key)
        if epoch is not None:
            self.transform.set_random_seed(image_seed(self.seed, epoch, i))
        img_path, mask_path = self.items[i]
        img = read_image(img_path)
        mask = read_mask(mask_path, img.size, self.kind, self.num_classes)
        if self.train:
            out = self.transform(image=np.asarray(img), mask=mask)
            image, mask = out["image"], out["mask"]
        else:  # the label map as it is: the prediction is scored at its size
            image = self.transform(image=np.asarray(img))["image"]
        return torch.from_numpy(image).permute(2, 0, 1).float(), torch.from_numpy(mask).long()

    def pixels(self, images: torch.Tensor) -> torch.Tensor:
        """Normalised (N, 3, H, W) images back in [0, 1] pixels (for the figure)."""
        mean, std = (torch.tensor(v, dtype=images.dtype).view(1, -1, 1, 1) for v in (self.mean, self.std))
        return (images.cpu() * std + mean).clamp(0, 1)


def collate_eval(batch: list) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Evaluation batches: the images stacked (one size), each label map kept at its own size in a list."""
    images, masks = zip(*batch)
    return torch.stack(images), list(masks)
