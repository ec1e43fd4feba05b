"""loss_curve.png's y axis names the loss the method trains on (each method's differs), in its space, and the
label is wrapped to the figure rather than cut off."""

from types import SimpleNamespace

import matplotlib.pyplot as plt
import pytest
import torch
from cli_runs import ONE_STEP, run_cli

from pretexts import create_pretext
from pretexts.engine import METHODS, Method, PretrainConfig
from pretexts.engine.training import figures


def method(name: str, task: str = "random-mask", backbone: str = "test_vit", build: bool = False, **method_args):
    cfg = PretrainConfig(method=name, backbone=backbone, task=task, img_size=32, method_args=method_args)
    built = METHODS.get(name)(cfg, create_pretext(task), torch.device("cpu"))
    if build:
        built.build()  # resolves --loss auto, as the run does before its first step
    return built


@pytest.mark.parametrize(
    "name, kwargs, expected",
    [
        ("energy", {"build": True}, "restoration error (patch-centred MSE, 16-px patches; mean of 2 steps)"),
        (
            "energy",
            {"backbone": "test_convnext", "build": True},
            "restoration error (MSE, pixels in [0, 1]; mean of 2 steps)",
        ),
        ("energy", {"loss": "smooth_l1", "steps": 1}, "restoration error (smooth L1, pixels in [0, 1])"),
        (
            "energy",
            {"task": "patch-sorting", "loss": "mse"},
            "restoration error (MSE of position embeddings; mean of 2 steps)",
        ),
        ("energy", {"loss": "patch-centred", "steps": 1}, "restoration error (patch-centred MSE)"),
        ("energy", {"steps": 0}, "energy ranking loss: softplus(E(clean) - E(corrupted))"),
        ("ae", {}, "reconstruction error (MSE, pixels in [0, 1])"),
        (
            "ae",
            {"task": "patch-sorting", "loss": "smooth_l1"},
            "reconstruction error (smooth L1 of position embeddings)",
        ),
        ("mae", {}, "masked-patch MSE (per-patch normalised pixels)"),
        ("mae", {"norm_pix_loss": False}, "masked-patch MSE (normalised pixels)"),
        ("simmim", {}, "masked-pixel L1 (pixels normalised by the backbone's mean and std)"),
    ],
)
def test_each_method_names_the_loss_it_trains_on(name, kwargs, expected):
    assert method(name, **kwargs).loss_name == expected


def test_an_unresolved_auto_loss_says_what_auto_picks():
    assert "--loss auto" in method("energy").loss_name


def test_a_plugin_method_that_names_no_loss_gets_a_plain_training_loss():
    class Turns(Method):
        pass

    cfg = SimpleNamespace(method="turns", task="random-mask", backbone="convnext_atto", method_args={})
    assert Turns(cfg, None, "cpu").loss_name == "training loss"


@pytest.fixture
def drawn(monkeypatch):
    """The loss curves as saved, kept open to be read."""
    saved, close = [], plt.close
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: saved.append(fig))
    monkeypatch.setattr(plt, "close", lambda fig: None)
    yield saved
    for fig in saved:
        close(fig)


@pytest.mark.parametrize("name", ["energy", "simmim", "mae"])
def test_the_loss_curves_y_axis_is_the_methods_loss_whole_and_inside_the_figure(drawn, name):
    loss_name = method(name, build=True).loss_name
    figures.loss_curve(list(range(1, 31)), [1 / s for s in range(1, 31)], "unused.png", "title", loss_name)
    (fig,) = drawn
    (ax,) = fig.axes
    assert "".join(ax.get_ylabel().split()) == "".join(loss_name.split())  # wrapped, every word kept
    fig.canvas.draw()
    box, page = ax.yaxis.label.get_window_extent(fig.canvas.get_renderer()), fig.bbox
    assert page.x0 <= box.x0 and page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)


def test_a_training_run_labels_its_loss_curve_with_its_methods_loss(tmp_path, monkeypatch):
    from pretexts.engine.training import loop

    calls = []
    monkeypatch.setattr(loop, "loss_curve", lambda *args: calls.append(args))
    result, error = run_cli([*ONE_STEP, "--monitor-every", "0", "--out", tmp_path / "run"])
    assert result.exit_code == 0, result.output
    (args,) = calls
    assert args[3] == "energy: random-mask on test_convnext"
    assert args[4] == "restoration error (MSE, pixels in [0, 1]; mean of 2 steps)"
