"""Figure: image | ground truth | prediction rows, classes in a fixed categorical palette (ignored pixels light
gray), a key of the classes shown and the mIoU of these images in the title. Each row is drawn at its label map's
size (the image the model saw resized to it), as it is scored."""

import colorsys

import matplotlib
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.patches import Patch

from pretexts.engine.training.figures import new_figure
from pretexts.engine.training.file_writes import save_figure as replace_figure

from .metrics import IGNORE, MIOU, confusion, scores

IGNORED_COLOUR = (224, 224, 224)  # light gray: ignored pixels, apart from every class
KEY_ENTRIES = 12  # the most classes the key names; the rest are counted


def class_palette(size: int = 256) -> np.ndarray:
    """(size, 3) uint8: tab20's strong colours then its light ones, without its grays (distinct, none near black),
    then hues spaced by the golden angle at fixed saturation and brightness; ignore (255) light gray."""
    order = [*range(0, 20, 2), *range(1, 20, 2)]  # strong before light: neighbouring classes differ in hue
    tab20 = [matplotlib.colormaps["tab20"].colors[i] for i in order if i not in (14, 15)]  # 14, 15: the grays
    colours = [tuple(round(255 * x) for x in c) for c in tab20]
    hue = 0.0
    while len(colours) < size:
        hue = (hue + 0.618034) % 1.0
        colours.append(tuple(round(255 * x) for x in colorsys.hsv_to_rgb(hue, 0.65, 0.9)))
    palette = np.array(colours[:size], dtype=np.uint8)
    palette[IGNORE] = IGNORED_COLOUR
    return palette


PALETTE = class_palette()


def save_figure(images: torch.Tensor, pred, truth, path, rows: int = 4, title: str = "") -> None:
    """The first `rows` images (pixels in [0, 1]) with their ground truth and prediction (label maps of one size per
    row: a batch, or lists of maps of several sizes); `title` (e.g. the backbone and epoch) goes before the figure's
    own line, which gives the mIoU of the images shown."""
    rows = min(rows, len(images))
    pred, truth = [p.long() for p in pred[:rows]], [t.long() for t in truth[:rows]]
    flat_pred, flat_truth = torch.cat([p.flatten() for p in pred]), torch.cat([t.flatten() for t in truth])
    known = flat_truth[flat_truth != IGNORE]
    classes = int(max(flat_pred.max().item(), known.max().item() if known.numel() else 0)) + 1
    miou = scores(confusion(flat_pred, flat_truth, classes))[MIOU]
    palette = PALETTE if classes <= len(PALETTE) else class_palette(classes)  # 16-bit masks: labels above 255
    fig = new_figure(figsize=(6, 2 * rows + 0.9))
    axes = fig.subplots(rows, 3, squeeze=False)
    for i in range(rows):
        image = images[i].float()[None]
        if image.shape[-2:] != truth[i].shape:
            image = F.interpolate(image, tuple(truth[i].shape), mode="bilinear", align_corners=False)
        img = image[0].permute(1, 2, 0).numpy()
        for ax, panel, name in zip(
            axes[i],
            (img.clip(0, 1), palette[truth[i].numpy()], palette[pred[i].numpy()]),
            ("image", "ground truth", "prediction"),
        ):
            ax.imshow(panel, interpolation="nearest")
            ax.set_axis_off()
            if i == 0:
                ax.set_title(name, fontsize=10)
    shown = sorted({*flat_truth.unique().tolist(), *flat_pred.unique().tolist()})
    named = [c for c in shown if c != IGNORE]
    key = [Patch(color=palette[c] / 255, label=f"class {c}") for c in named[:KEY_ENTRIES]]
    if len(named) > KEY_ENTRIES:
        key.append(Patch(color="white", label=f"+{len(named) - KEY_ENTRIES} more"))
    if IGNORE in shown:
        key.append(Patch(facecolor=np.array(IGNORED_COLOUR) / 255, edgecolor="0.6", label=f"ignored ({IGNORE})"))
    fig.legend(handles=key, loc="lower center", ncol=min(len(key), 5), fontsize=8, frameon=False)
    line = f"{rows} val image{'s' if rows > 1 else ''}: image | ground truth | prediction; mIoU of these {miou:.1f} %"
    fig.suptitle(f"{title}\n{line}" if title else line, fontsize=10)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight() * (1 + (len(key) - 1) // 5), 1, 1))
    replace_figure(fig, path)  # by rename: never through a link, never half a file
