"""PNG figures: corrupted | restored after each step | original, and the loss curve."""

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from pretexts.engine.training.run_folder import save_figure  # noqa: E402


def restoration_figure(columns: dict[str, torch.Tensor], path, title: str = "") -> None:
    """One row per image, one column per named batch [B,3,H,W] in [0,1] (shown in order)."""
    names = list(columns)
    rows = columns[names[0]].shape[0]
    fig, axes = plt.subplots(rows, len(names), figsize=(1.6 * len(names), 1.6 * rows), squeeze=False)
    for c, name in enumerate(names):
        images = columns[name].detach().float().clamp(0, 1).permute(0, 2, 3, 1).cpu().numpy()
        for r in range(rows):
            ax = axes[r][c]
            ax.imshow(images[r], interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(textwrap.fill(name, 16), fontsize=9)  # a long name on two lines, not over its neighbour
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)  # by rename: never through a link, never half a file
    plt.close(fig)


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
