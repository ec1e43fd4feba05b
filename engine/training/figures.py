"""PNG figures: corrupted | restored after each step | original, and the loss curve."""

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torchvision.utils import make_grid  # noqa: E402

from pretexts.engine.training.run_folder import save_figure  # noqa: E402


def restoration_figure(columns: dict[str, torch.Tensor], path, title: str = "") -> None:
    """One row per image, one column per named batch [B,3,H,W] in [0,1] (shown in order). A column is drawn as one
    image, its batch stacked with white gaps: one axes a column, not one a cell, as axes are matplotlib's cost."""
    names = list(columns)
    rows = columns[names[0]].shape[0]
    fig, axes = plt.subplots(1, len(names), figsize=(1.6 * len(names), 1.6 * rows), squeeze=False, layout="constrained")
    for ax, name in zip(axes[0], names):
        ax.imshow(stacked(columns[name]), interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_frame_on(False)
        ax.set_title(textwrap.fill(name, 16), fontsize=9)  # a long name on two lines, not over its neighbour
    if title:
        fig.suptitle(title, fontsize=10)
    save_figure(fig, path)  # by rename: never through a link, never half a file
    plt.close(fig)


def stacked(images: torch.Tensor):
    """[B,3,H,W] in [0,1] as one [B*(H+gap)-gap, W, 3] array, the images top to bottom with white gaps between."""
    gap = max(1, images.shape[-2] // 16)
    grid = make_grid(images.detach().float().clamp(0, 1).cpu(), nrow=1, padding=gap, pad_value=1.0)
    return grid[:, gap:-gap, gap:-gap].permute(1, 2, 0).numpy()  # the grid's outer border off


def loss_curve(steps: list[int], losses: list[float], path, title: str = "restoration loss") -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, losses, lw=0.8, label="loss")
    if len(losses) >= 20:
        k = max(5, len(losses) // 20)
        smooth = torch.tensor(losses).unfold(0, k, 1).mean(1).tolist()
        ax.plot(steps[k - 1 :], smooth, lw=1.8, label=f"mean of {k}")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)  # by rename: never through a link, never half a file
    plt.close(fig)
