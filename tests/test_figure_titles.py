"""A figure's title is wrapped to the figure's width and given room: no long title (a restore's numbers, a plugin's
names) is cut off at the edges or drawn over the column titles."""

import matplotlib.pyplot as plt
import pytest
import torch

from pretexts.engine.evaluation import energy_histogram
from pretexts.engine.training import figures

LONG = (
    "denoising restored by convnext_atto (2 steps), 2 images: corrupted 0.3820, restored 0.3820, trivial 0.0550 "
    "(best constant shrinkage toward the image mean), known pixels kept 0.0123, on a backbone with a long name"
)


@pytest.fixture
def drawn(monkeypatch):
    """The figures as saved, drawn again at the size they were saved."""
    saved, close = [], plt.close
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: saved.append(fig))
    monkeypatch.setattr(energy_histogram, "save_figure", lambda fig, path: saved.append(fig))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    yield saved
    for fig in saved:
        close(fig)


def inside(fig, text) -> bool:
    fig.canvas.draw()
    box, page = text.get_window_extent(fig.canvas.get_renderer()), fig.bbox
    return page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1


@pytest.mark.parametrize("columns, rows", [(2, 1), (4, 2), (6, 8)])
def test_a_long_restoration_title_is_wrapped_inside_the_figure_above_the_columns(drawn, columns, rows):
    names = ["corrupted", *(f"step {j}" for j in range(1, columns - 1)), "original"]
    figures.restoration_figure({name: torch.rand(rows, 3, 32, 32) for name in names}, "unused.png", LONG)
    (fig,) = drawn
    title = fig._suptitle
    assert inside(fig, title) and title.get_text().replace("\n", " ") == LONG
    renderer = fig.canvas.get_renderer()
    lowest = title.get_window_extent(renderer).y0
    for ax in fig.axes:  # the column titles and the images lie below the title
        assert inside(fig, ax.title) and ax.title.get_window_extent(renderer).y1 <= lowest
        assert ax.get_window_extent(renderer).height > 0.5 * fig.get_figheight() * fig.dpi / rows


def test_a_short_title_stays_on_one_line(drawn):
    figures.restoration_figure({"corrupted": torch.rand(2, 3, 32, 32)}, "unused.png", "colorization, epoch 1")
    assert drawn[0]._suptitle.get_text() == "colorization, epoch 1"


def test_the_loss_curve_and_the_energy_histogram_wrap_their_titles(drawn):
    figures.loss_curve([1, 2, 3], [0.3, 0.2, 0.1], "unused.png", LONG)
    scores = {"real": torch.rand(8), "corrupted": torch.rand(8) + 1}
    energy_histogram.histogram_figure(scores, "unused.png", LONG)
    for fig in drawn:
        (ax,) = [ax for ax in fig.axes if ax.get_title()]
        assert inside(fig, ax.title) and "\n" in ax.get_title()
