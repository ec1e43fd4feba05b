"""A trivial restorer beside every restoration number: each task's own (`Pretext.trivial_restore`), below the
corrupted input's error on real images, carried in the held-out dict, the held-out line and the figure's title."""

import json

import pytest
import torch
import torch.nn.functional as F
from cli_runs import ONE_STEP

from pretexts import create_pretext, get_pretext_class, list_pretexts
from pretexts.base import Corrupted
from pretexts.engine.methods.energy import restoration_error
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.energy.report import restoration_report
from pretexts.engine.methods.states import state_adapter
from pretexts.tasks.masking import FILLS

CASES = [("random-mask", {"fill": fill}) for fill in FILLS] + [
    ("random-mask", {"preset": "small"}),
    ("gridded-mask", {"grid": 8}),
    ("gridded-mask", {"fill": "black"}),
    ("super-resolution", {}),
    ("super-resolution", {"scale": 4}),
    ("super-resolution", {"scale": 3}),
    ("denoising", {}),
    ("denoising", {"gamma_low": 0.5}),
    ("colorization", {}),
    ("mixed", {}),
]


def errors(task, images, seed=0):
    sample = task(images, torch.Generator().manual_seed(seed))
    restored = task.trivial_restore(sample)
    assert restored.shape == sample.target.shape and restored.dtype == sample.state.dtype
    return F.mse_loss(sample.state, sample.target).item(), F.mse_loss(restored, sample.target).item()


@pytest.mark.parametrize("name, kwargs", CASES, ids=lambda v: str(v))
def test_the_trivial_restorer_beats_the_corrupted_input_on_real_images(name, kwargs, held_out_images):
    task = create_pretext(name, **kwargs)
    corrupted, trivial = errors(task, held_out_images)
    if name == "colorization":  # the grayscale is its own trivial restorer
        assert trivial == pytest.approx(corrupted, rel=1e-3)
    else:
        assert trivial < 0.98 * corrupted, (corrupted, trivial)
    assert task.trivial_restorer


def test_every_pixel_task_but_plugins_has_one_and_patch_sorting_has_none():
    for name in list_pretexts():
        cls = get_pretext_class(name)
        task = cls()
        if task.state_kind == "pixels" and cls.__module__.startswith("pretexts."):
            assert task.trivial_restorer, name
    assert create_pretext("patch-sorting").trivial_restorer is None
    sample = Corrupted(state=torch.zeros(1, 4, 8), target=torch.zeros(1, 4, 8))
    assert create_pretext("patch-sorting").trivial_restore(sample) is None


def test_mask_trivial_restorer_is_the_visible_mean_fill(real_images):
    task = create_pretext("random-mask", fill="black")
    sample = task(real_images, torch.Generator().manual_seed(0))
    restored = task.trivial_restore(sample)
    for image, out, mask in zip(real_images, restored, sample.info["mask"]):
        assert torch.equal(out[:, ~mask], image[:, ~mask])
        expected = image[:, ~mask].mean(1, keepdim=True).expand(-1, int(mask.sum()))
        assert torch.allclose(out[:, mask], expected, atol=1e-6)


def test_super_resolution_trivial_restorer_is_bicubic_upsampling(real_images):
    task = create_pretext("super-resolution", scale=4)
    sample = task(real_images, torch.Generator().manual_seed(0))
    expected = F.interpolate(sample.info["low"], scale_factor=4, mode="bicubic", align_corners=False).clamp(0, 1)
    assert torch.allclose(task.trivial_restore(sample), expected)
    assert torch.equal(sample.state[..., ::4, ::4], sample.info["low"])  # nearest blocks from the top-left


def test_denoising_trivial_restorer_is_the_best_shrinkage_toward_the_image_mean(real_images):
    task = create_pretext("denoising")
    sample = task(real_images, torch.Generator().manual_seed(0))
    restored = task.trivial_restore(sample)
    mean = sample.state.mean((2, 3), keepdim=True)

    def error(k):
        return F.mse_loss(mean + k * (sample.state - mean), sample.target).item()

    best = error(1.0) + 1
    for k in torch.linspace(0, 1, 201).tolist():
        best = min(best, error(k))
    assert F.mse_loss(restored, sample.target).item() <= best + 1e-6
    assert F.mse_loss(restored, sample.target).item() < error(1.0)  # k = 1 is the corrupted input


def test_mixed_restores_each_group_with_its_own_task(real_images):
    task = create_pretext("mixed", tasks="random-mask,colorization")
    sample = task(real_images, torch.Generator().manual_seed(0))
    restored = task.trivial_restore(sample)
    masked = sample.info["task"] == 0
    part = Corrupted(sample.state[masked], sample.target[masked], info=sample.info["parts"][0])
    assert torch.equal(restored[masked], task.subtasks[0].trivial_restore(part))
    assert torch.equal(restored[~masked], sample.state[~masked])
    assert create_pretext("mixed", tasks="random-mask").trivial_restorer == "each task's own"


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    return create_energy_model("vit_tiny", img_size=32, depth=1)


@pytest.mark.parametrize("name", ["random-mask", "super-resolution", "denoising", "colorization", "mixed"])
def test_the_held_out_dict_carries_the_trivial_restorer(name, tiny_model, held_out_images):
    task = state_adapter(create_pretext(name), tiny_model).prepare()
    held = restoration_error(tiny_model, task, [held_out_images[:16], held_out_images[16:]], 1, "cpu", seed=3)
    generator = torch.Generator().manual_seed(3)
    expected = []
    for images in (held_out_images[:16], held_out_images[16:]):
        sample = task(images, generator)
        expected.append(F.mse_loss(task.trivial_restore(sample), sample.target).item())
    assert held.trivial_mse == pytest.approx(sum(expected) / 2, rel=1e-5)
    assert held.to_dict()["trivial_restorer"] == task.trivial_restorer
    json.dumps(held.to_dict())  # results.json takes it as it is


def test_the_held_out_dict_has_none_for_a_task_without_one(tiny_model, held_out_images):
    task = state_adapter(create_pretext("patch-sorting", edge_max=1), tiny_model).prepare()
    held = restoration_error(tiny_model, task, [held_out_images[:4]], 1, "cpu")
    assert "trivial_mse" not in held.to_dict()
    assert "trivial" not in held.format()


def test_the_held_out_line_says_whether_the_model_beats_the_trivial_restorer():
    held = restoration_report(80, 0.2, [0.1, 0.086], 0.03, "visible-mean fill")
    line = held.format()
    assert line.endswith(
        "(0.43x the corrupted input's error; a trivial restorer (visible-mean fill) gets 0.15x: "
        "the model is not better than it)"
    ), line
    better = restoration_report(80, 0.2, [0.1, 0.024], 0.03, "visible-mean fill").format()
    assert better.endswith("gets 0.15x: the model beats it (0.80x its error))"), better
    one_step = restoration_report(80, 0.2, [0.024], 0.03, "visible-mean fill")
    assert "MSE 0.03000: the model beats it" in one_step.versus_trivial(as_ratio=False)
    assert held.figure_numbers() == (
        "restoration MSE of these 80: corrupted 0.2000, restored 0.0860, trivial 0.0300 (visible-mean fill)"
    )
    assert "trivial" not in restoration_report(80, 0.2, [0.1, 0.086]).format()


def test_a_run_reports_the_trivial_restorer_in_results_line_and_figure_title(tmp_path):
    from click.testing import CliRunner

    from pretexts.cli import main

    out = tmp_path / "run"
    options = ["--eval-images", "8", "--figure-images", "2"]
    result = CliRunner().invoke(main, [*ONE_STEP, *options, "--out", str(out)])
    assert result.exit_code == 0, result.output
    held = json.loads((out / "results.json").read_text())["held_out"]
    assert held["trivial_restorer"] == "visible-mean fill" and 0 < held["trivial_mse"] < held["corrupted_mse"]
    assert "a trivial restorer (visible-mean fill) gets" in result.output


def test_the_figure_title_carries_the_figures_own_numbers(tiny_model, held_out_images):
    from pretexts.engine.methods.energy import EnergyMethod
    from pretexts.engine.training.config import PretrainConfig

    method = EnergyMethod(PretrainConfig(backbone="vit_tiny", task="random-mask"), create_pretext("random-mask"), "cpu")
    method.model = tiny_model
    columns, title = method.figure(held_out_images[:3])
    first, second = title.split("\n")
    assert second == "random-mask on vit_tiny" and first.startswith("restoration MSE of these 3: corrupted ")
    assert first.endswith("(visible-mean fill)") and list(columns)[0] == "corrupted"


def test_restore_command_reports_the_trivial_restorer(tmp_path):
    from click.testing import CliRunner
    from pretrained_checkpoints import write_checkpoint

    from pretexts.cli import main

    checkpoint, _ = write_checkpoint(tmp_path / "checkpoint.pt", backbone="test_convnext", task="random-mask")
    out = tmp_path / "restored.png"
    result = CliRunner().invoke(main, ["restore", "--checkpoint", str(checkpoint), "--images", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "; a trivial restorer (visible-mean fill) gets MSE " in result.output
    saved = json.loads(out.with_suffix(".json").read_text())
    assert saved["trivial_restorer"] == "visible-mean fill" and saved["trivial_mse"] < saved["corrupted_mse"]
