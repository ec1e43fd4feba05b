"""The package's figures say what they show: a title keeps its lines, a noisy state is not clipped and each row
names its noise, compare's arms keep their colours, histograms stay apart, segmentation has a key."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.collections import PathCollection
from matplotlib.patches import Polygon

from pretexts import create_pretext
from pretexts.engine.compare import report as compare_report
from pretexts.engine.evaluation import energy_histogram
from pretexts.engine.evaluation.segmentation import figure as segmentation_figure
from pretexts.engine.methods.report import HeldOut, with_figure_numbers
from pretexts.engine.training import figures


@pytest.fixture
def drawn(monkeypatch):
    """The figures as saved, kept open instead of written."""
    saved, close = [], plt.close
    for module in (figures, energy_histogram, compare_report):
        monkeypatch.setattr(module, "save_figure", lambda fig, path: saved.append(fig))
    monkeypatch.setattr(segmentation_figure, "replace_figure", lambda fig, path: saved.append(fig))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    yield saved
    for fig in saved:
        close(fig)


def test_a_wrapped_title_keeps_the_task_line_apart_from_the_numbers(drawn):
    held = HeldOut(8, 0.0355, [0.0351], ("step 1",), trivial_mse=0.0281, trivial_restorer="visible-mean fill")
    title = with_figure_numbers("random-mask on convnext_atto", held) + ", epoch 4"
    columns = {name: torch.rand(2, 3, 32, 32) for name in ("corrupted", "step 1", "original")}
    figures.restoration_figure(columns, "unused.png", title)
    text = drawn[0]._suptitle.get_text()
    assert text.count("\n") >= 2  # the numbers line was wrapped, onto lines of its own
    assert text.split("\n")[-1] == "random-mask on convnext_atto, epoch 4"


def test_the_figure_numbers_name_the_measure():
    held = HeldOut(8, 0.9, [1.1], ("reconstructed",), measure="masked-patch MSE", baseline="patch-mean fill")
    assert held.figure_numbers().startswith("masked-patch MSE of these 8: patch-mean fill 0.9000")


def denoised(task_name: str, **args):
    task = create_pretext(task_name, **args)
    images = torch.rand(6, 3, 16, 16)
    return task, task(images, torch.Generator().manual_seed(0))


def test_the_denoising_preview_shows_the_noisy_state_unclipped_and_names_each_rows_g(drawn):
    task, sample = denoised("denoising")
    preview = task.preview(sample, sample.state)
    assert preview.min() >= 0 and preview.max() <= 1
    assert preview.flatten(1).amin(1).tolist() == [0.0] * 6 and preview.flatten(1).amax(1).allclose(torch.ones(6))
    gammas = sample.info["gamma"].tolist()
    assert preview.row_labels == [f"g = {g:.2f}" for g in gammas] and "stretched" in preview.display
    figures.restoration_figure({"corrupted": preview, "original": sample.target}, "unused.png", "t")
    fig = drawn[0]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == preview.row_labels
    assert "stretched" in fig._supxlabel.get_text()


def test_a_mixed_figure_names_each_rows_task_and_a_denoising_rows_g():
    task, sample = denoised("mixed", tasks=("denoising", "colorization"))
    preview = task.preview(sample, sample.state)
    assert preview.min() >= 0 and preview.max() <= 1
    which = sample.info["task"].tolist()
    assert 0 in which and 1 in which, "the seed should draw both tasks"
    for row, index in enumerate(which):
        label = preview.row_labels[row]
        assert label.startswith("denoising\ng = ") if index == 0 else label == "colorization"


def compare_row(arm: str, linear: float, seeds: int = 1, budget: float = 5.0) -> dict:
    scores = {"knn": (linear + 1, 0.5), "knn_std": None, "linear": (linear, 0.5), "finetune": None}
    return {"arm": arm, "budget": budget, "unit": "minutes", "minutes": budget, "seeds": seeds, "steps": 10, **scores}


def dot_colours(fig) -> dict[str, tuple]:
    """Each arm's dot colour in the first panel, by its label."""
    ax = fig.axes[0]
    names = {round(t.get_position()[1]): t.get_text() for t in ax.get_yticklabels()}
    (dots,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    ys = [round(y) for _, y in dots.get_offsets()]
    return {names[y].split(" (")[0].lstrip("=0123456789 "): tuple(c) for y, c in zip(ys, dots.get_facecolors())}


def test_compare_gives_an_arm_one_colour_whatever_its_rank_and_zooms_to_the_data(drawn, tmp_path):
    first = [compare_row("energy", 30.0), compare_row("ae", 28.0), compare_row("simmim", 27.0)]
    second = [compare_row("energy", 26.0), compare_row("ae", 29.0), compare_row("simmim", 31.0)]
    compare_report.plot(first, "linear", tmp_path / "compare.png", "on '/home/someone/data/cifar'", val_images=80)
    compare_report.plot(second, "linear", tmp_path / "compare.png", "t", val_images=80)
    a, b = (dot_colours(fig) for fig in drawn)
    assert a == b and len(set(a.values())) == 3
    assert drawn[0].axes[0].get_xlim()[0] > 20  # not from 0: 1-3 points apart must show
    assert "/home" not in drawn[0]._suptitle.get_text() and "'cifar'" in drawn[0]._suptitle.get_text()
    assert any(t.get_text().startswith("=1 ") for t in drawn[0].axes[0].get_yticklabels())  # a tie is marked
    assert not any(t.get_visible() and t.get_text() for t in drawn[0].axes[1].get_yticklabels())


def test_the_energy_histogram_draws_each_group_as_an_outline(drawn):
    scores = {
        name: torch.randn(32) + i for i, name in enumerate(["real", "corrupted", *map("step {}".format, [1, 2, 3, 4])])
    }
    energy_histogram.histogram_figure(scores, "unused.png", "energy")
    ax = drawn[0].axes[0]
    outlines = [p for p in ax.patches if isinstance(p, Polygon)]
    assert len(outlines) == 6 and not any(p.get_fill() for p in outlines)
    assert len({p.get_edgecolor() for p in outlines}) == 6
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(scores)


def test_segmentation_predictions_have_a_title_a_key_and_a_readable_palette(drawn):
    palette = segmentation_figure.PALETTE
    assert palette[:255].sum(1).min() > 150  # no near-black class colour
    assert tuple(palette[255]) not in {tuple(c) for c in palette[:255]}
    truth = torch.zeros(2, 8, 8, dtype=torch.long)
    truth[:, :2] = 255
    truth[:, 4:, 4:] = 3
    segmentation_figure.save_figure(torch.zeros(2, 3, 8, 8), truth.clamp(max=3), truth, "unused.png")
    fig = drawn[0]
    assert "mIoU of these 100.0 %" in fig._suptitle.get_text()
    keys = [t.get_text() for t in fig.legends[0].get_texts()]
    assert keys == ["class 0", "class 3", "ignored (255)"]
    assert [ax.get_title() for ax in fig.axes[:3]] == ["image", "ground truth", "prediction"]
    assert np.array_equal(fig.axes[1].get_images()[0].get_array()[0, 0], palette[255])
