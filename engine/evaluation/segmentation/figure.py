"""Figure: image | prediction | ground truth rows, classes in a fixed palette (ignored pixels black)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from pretexts.engine.training.run_folder import save_figure as replace_figure  # noqa: E402

from .data import MEAN, STD  # noqa: E402
from .metrics import IGNORE  # noqa: E402

PALETTE = np.random.default_rng(0).integers(40, 256, (256, 3)).astype(np.uint8)
PALETTE[0] = (0, 0, 0)  # class 0 (background in the generated set) stays dark
PALETTE[IGNORE] = (0, 0, 0)


def save_figure(images: torch.Tensor, pred: torch.Tensor, truth: torch.Tensor, path, rows: int = 4) -> None:
    rows = min(rows, len(images))
    fig, axes = plt.subplots(rows, 3, figsize=(6, 2 * rows), squeeze=False)
    for i in range(rows):
        img = images[i].permute(1, 2, 0).numpy() * np.array(STD) + np.array(MEAN)
        for ax, panel, title in zip(
            axes[i],
            (img.clip(0, 1), PALETTE[pred[i].numpy()], PALETTE[truth[i].numpy()]),
            ("image", "prediction", "ground truth"),
        ):
            ax.imshow(panel)
            ax.set_axis_off()
            if i == 0:
                ax.set_title(title)
    fig.tight_layout()
    replace_figure(fig, path)  # by rename: never through a link, never half a file
    plt.close(fig)
