"""PNG figures: corrupted | restored after each step | original, and the loss curve; titles wrapped to fit.

A task's `preview` may describe what it shows, as attributes of the tensor it returns: `row_labels` (one short
text per image, e.g. its noise level, written left of the rows) and `display` (how the state was mapped into [0, 1]
for display, written under the figure), so a state that is not an image in [0, 1] is not shown clipped unsaid."""

import math
import textwrap

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator
from torchvision.utils import make_grid

from pretexts.engine.training.file_writes import save_figure


def new_figure(**options) -> Figure:
    """A figure drawn by Agg without pyplot: the caller's backend (a notebook's inline one) is never switched, and
    pyplot's open figures never hold it (nothing to close)."""
    fig = Figure(**options)
    FigureCanvasAgg(fig)
    return fig


def restoration_figure(columns: dict[str, torch.Tensor], path, title: str = "") -> None:
    """One row per image, one column per named batch [B,3,H,W] in [0,1] (shown in order). A column is drawn as one
    image, its batch stacked with white gaps: one axes a column, not one a cell, as axes are matplotlib's cost.
    A column's `row_labels` (its first with them) name the rows on the left; each distinct `display` note is
    written under the images."""
    names = list(columns)
    rows = columns[names[0]].shape[0]
    fig = new_figure(figsize=(1.6 * len(names), 1.6 * rows), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)
    for ax, name in zip(axes[0], names):
        ax.imshow(stacked(columns[name]), interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_frame_on(False)
        ax.set_title(textwrap.fill(name, 16), fontsize=9)  # a long name on two lines, not over its neighbour
    labels = next((getattr(c, "row_labels", None) for c in columns.values() if getattr(c, "row_labels", None)), None)
    if labels and len(labels) >= rows:  # a preview naming fewer rows than it shows names none
        longest = max(len(line) for label in labels[:rows] for line in label.split("\n"))
        fig.set_figwidth(1.6 * len(names) + 0.07 * longest)  # the labels' room, so the images keep their width
        height, gap = columns[names[0]].shape[-2], max(1, columns[names[0]].shape[-2] // 16)
        axes[0][0].set_yticks([i * (height + gap) + (height - 1) / 2 for i in range(rows)], labels[:rows], fontsize=8)
        axes[0][0].tick_params(axis="y", length=0)
    notes = list(dict.fromkeys(note for c in columns.values() if (note := getattr(c, "display", None))))
    footer = fit_width(fig.supxlabel("\n".join(notes), fontsize=8), fig.bbox.width) if notes else 0
    lines = fit_width(fig.suptitle(title, fontsize=10), fig.bbox.width) if title else 0
    fig.set_figheight(1.6 * rows + 0.2 * lines + 0.18 * footer)  # each text line its own height: the images keep theirs
    save_figure(fig, path)  # by rename: never through a link, never half a file


def fit_width(text, width: float, along: str = "width") -> int:
    """Wrap a title onto lines until it is at most `width` display pixels wide as drawn (a title carries names and
    numbers of any length, and its font's width varies); returns its number of lines. `along="height"` measures a
    vertical text (a y label) along its length."""
    renderer = text.figure.canvas.get_renderer()
    words, chars = text.get_text(), max(len(line) for line in text.get_text().split("\n"))
    while (drawn := getattr(text.get_window_extent(renderer), along)) > width * 0.96 and chars > 1:
        chars = min(chars - 1, int(chars * width * 0.96 / drawn))
        text.set_text(wrap_lines(words, max(chars, 1)))
    return text.get_text().count("\n") + 1


def wrap_lines(text: str, chars: int) -> str:
    """Each line of `text` wrapped to `chars` on its own: a title's line breaks (numbers apart from "task on
    backbone, epoch N") are kept, where one fill of the whole would turn them into spaces."""
    return "\n".join(textwrap.fill(line, chars) for line in text.split("\n"))


def fit_axes_title(ax) -> None:
    """Lay out a one-axes figure with its title wrapped to fit: the title is centred on the axes, which the layout
    moves (room for the labels), so it is fitted to the room either side of the axes' centre, laid out, fitted again."""
    fig = ax.figure
    for _ in range(2):
        box = ax.get_window_extent(fig.canvas.get_renderer())
        centre = (box.x0 + box.x1) / 2
        fit_width(ax.title, 2 * min(centre, fig.bbox.width - centre))
        fig.tight_layout()


def stacked(images: torch.Tensor):
    """[B,3,H,W] in [0,1] as one [B*(H+gap)-gap, W, 3] array, the images top to bottom with white gaps between."""
    gap = max(1, images.shape[-2] // 16)
    grid = make_grid(images.detach().float().clamp(0, 1).cpu(), nrow=1, padding=gap, pad_value=1.0)
    return grid[:, gap:-gap, gap:-gap].permute(1, 2, 0).numpy()  # the grid's outer border off


def loss_curve(
    steps: list[int], losses: list[float], path, title: str = "restoration loss", loss_name: str = "training loss"
) -> None:
    """The loss per logged step (and its running mean from 20 steps), on a log axis only where the losses span more
    than a decade; ticks in plain decimals, steps as integers. The y axis is `loss_name` (the method's
    `Method.loss_name`: each method trains on its own loss), wrapped to the axes' height."""
    fig = new_figure(figsize=(6, 3.5))
    ax = fig.subplots()
    ax.plot(steps, losses, lw=0.8, label="loss")
    if len(losses) >= 20:
        k = max(5, len(losses) // 20)
        ax.plot(steps[k - 1 :], running_mean(losses, k), lw=1.8, label=f"mean of {k}")
    ax.set_xlabel("optimiser step")
    label, height = ax.set_ylabel(loss_name), ax.get_window_extent().height
    if fit_width(label, height, along="height") > 1:  # too long for one line: its words in brackets on their own
        label.set_text(loss_name.replace(" (", "\n(", 1))
        fit_width(label, height, along="height")
    positive = [v for v in losses if v > 0]
    if len(positive) == len(losses) and positive and max(positive) > 10 * min(positive):
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # "0.1", not "10^-1"
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if leading_digit(v) in (2, 5) else ""))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    ax.legend()
    fit_axes_title(ax)
    save_figure(fig, path)  # by rename: never through a link, never half a file


def running_mean(values: list[float], k: int) -> list[float]:
    """The mean of each `k` consecutive values (len(values) - k + 1 of them), from one cumulative sum: linear in the
    run's length, where a window's own sum each is k times the work (k grows with the run). float64: the sum of a
    long run's losses keeps its last digits."""
    total = torch.tensor([0.0, *values], dtype=torch.float64).cumsum(0)
    return ((total[k:] - total[:-k]) / k).tolist()


def leading_digit(value: float) -> int:
    """3 for 0.03 or 300: which minor ticks of a log axis are labelled (2 and 5), so labels do not crowd."""
    return round(value / 10 ** math.floor(math.log10(value))) if value > 0 else 0
