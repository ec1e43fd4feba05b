"""A seeded segmentation set: textured shapes pasted on real CIFAR backgrounds, in the generic layout.

ADE20K cannot be fetched here; this gives tests and the benchmark real-looking images with exact masks.
Class 0 is background; 1.. are shapes.
"""

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ("disc", "square", "triangle", "cross")
SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample_data"


def _draw(draw: ImageDraw.ImageDraw, shape: str, cx: int, cy: int, r: int) -> None:
    if shape == "disc":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=255)
    elif shape == "square":
        draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=255)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=255)
    else:
        w = max(1, r // 3)
        draw.rectangle([cx - r, cy - w, cx + r, cy + w], fill=255)
        draw.rectangle([cx - w, cy - r, cx + w, cy + r], fill=255)


def scene(background: Image.Image, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(image HxWx3 uint8, mask HxW uint8) with 1-3 shapes, each a class with its own stripe texture."""
    img = np.asarray(background.convert("RGB").resize((size, size), Image.BILINEAR)).copy()
    mask = np.zeros((size, size), np.uint8)
    yy, xx = np.mgrid[:size, :size]
    for _ in range(rng.integers(1, 4)):
        k = int(rng.integers(len(SHAPES)))
        r = int(rng.integers(size // 8, size // 4 + 1))
        cx, cy = (int(v) for v in rng.integers(r, size - r, 2))
        layer = Image.new("L", (size, size))
        _draw(ImageDraw.Draw(layer), SHAPES[k], cx, cy, r)
        region = np.asarray(layer) > 0
        colour = np.array([[230, 40, 40], [40, 200, 60], [50, 80, 230], [230, 210, 40]][k])
        stripes = (((xx + yy * (k % 2)) // (2 + k)) % 2)[..., None] * 0.35 + 0.65
        img[region] = (colour * stripes)[region].astype(np.uint8)
        mask[region] = k + 1
    return img, mask


def write_generated(out: str | Path, n_train: int = 64, n_val: int = 16, size: int = 64, seed: int = 0) -> Path:
    """Write images/{training,validation}/*.png and masks/... with the same stems; deterministic in seed."""
    out = Path(out)
    backgrounds = sorted(SAMPLE.glob("*/*/*.png"))
    rng = np.random.default_rng(seed)
    for split, n in (("training", n_train), ("validation", n_val)):
        (out / "images" / split).mkdir(parents=True, exist_ok=True)
        (out / "masks" / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            img, mask = scene(Image.open(backgrounds[int(rng.integers(len(backgrounds)))]), rng, size)
            Image.fromarray(img).save(out / "images" / split / f"{i:05d}.png")
            Image.fromarray(mask).save(out / "masks" / split / f"{i:05d}.png")
    return out


NUM_CLASSES = len(SHAPES) + 1
