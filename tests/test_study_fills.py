"""The masks' `noise` and `mean` fills left the package for the representation study's own task plugin
(studies/representation/study_fills.py): there they corrupt as the package did, and the package refuses them."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from pretext_images import cifar_batch, tiny_vit
from test_draw_apply import fingerprint

from pretexts import ParameterError, create_pretext, registry
from pretexts.cli import main
from pretexts.engine.methods.states import state_adapter
from pretexts.tasks.masking import IMAGENET_MEAN, NEAR_MEAN

STUDY_FILLS = Path(__file__).resolve().parents[1] / "studies" / "representation" / "study_fills.py"


@pytest.fixture(scope="module")
def study_task():
    """The study's task name, registered for this module's tests and removed after them."""
    spec = importlib.util.spec_from_file_location("study_fills", STUDY_FILLS)
    module = importlib.util.module_from_spec(spec)
    sys.modules["study_fills"] = module
    try:
        spec.loader.exec_module(module)
        yield module.STUDY_TASK
    finally:
        registry.TASKS.table.pop(getattr(module, "STUDY_TASK", ""), None)
        sys.modules.pop("study_fills", None)


def corrupt(name, images, seed=0, **kwargs):
    return create_pretext(name, **kwargs)(images, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("preset", ["large", "small"])
def test_the_study_task_is_the_packages_random_mask_for_its_fills(study_task, real_images, preset):
    for fill in ("gray", "black"):
        study = corrupt(study_task, real_images, preset=preset, fill=fill)
        package = corrupt("random-mask", real_images, preset=preset, fill=fill)
        assert torch.equal(study.state, package.state) and torch.equal(study.info["mask"], package.info["mask"])


def test_noise_fill_is_uniform_seeded_and_leaves_the_mask_as_it_was(study_task, real_images):
    sample = corrupt(study_task, real_images, fill="noise")
    gray = corrupt("random-mask", real_images)  # the same seed: the noise is drawn after the boxes
    mask = sample.info["mask"].unsqueeze(1).expand_as(real_images)
    assert torch.equal(sample.info["mask"], gray.info["mask"])
    assert torch.equal(sample.state[~mask], real_images[~mask])
    values = sample.state[mask]
    assert values.numel() > 5000
    assert values.mean().item() == pytest.approx(0.5, abs=0.01)
    assert values.std().item() == pytest.approx(12**-0.5, abs=0.01)  # U(0, 1): 0.2887
    assert torch.equal(corrupt(study_task, real_images, fill="noise").state, sample.state)
    assert not torch.equal(corrupt(study_task, real_images, seed=1, fill="noise").state, sample.state)


def test_mean_fill_is_each_images_visible_mean_colour(study_task, real_images):
    sample = corrupt(study_task, real_images, fill="mean")
    assert torch.equal(sample.info["mask"], corrupt("random-mask", real_images).info["mask"])
    checked = 0
    for image, state, mask in zip(real_images, sample.state, sample.info["mask"], strict=True):
        expected = image[:, ~mask].mean(1)
        if (expected - torch.tensor(IMAGENET_MEAN)).abs().max() < NEAR_MEAN:
            continue  # nudged: the next test
        filled = state[:, mask]
        assert torch.allclose(filled, expected[:, None].expand_as(filled), atol=1e-6)
        checked += 1
    assert checked > 0


def test_mean_fill_is_nudged_off_the_normalisation_mean(study_task):
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    near = (mean + torch.tensor([0.005, -0.01, -0.003]).view(1, 3, 1, 1)).expand(1, 3, 32, 32).contiguous()
    sample = corrupt(study_task, near, count=1, low=0.25, high=0.25, fill="mean")
    filled = sample.state[0][:, sample.info["mask"][0]]
    nudged = torch.tensor(IMAGENET_MEAN) + torch.tensor([0.02, -0.02, -0.02])
    assert filled.numel() and torch.allclose(filled, nudged.view(3, 1).expand_as(filled))


@pytest.mark.parametrize("fill", ["noise", "mean"])
def test_the_package_refuses_the_studys_fills_in_one_line(fill):
    with pytest.raises(ParameterError, match=rf"^random-mask: parameter 'fill' is '{fill}'; allowed: gray, black\.$"):
        create_pretext("random-mask", fill=fill)
    result = CliRunner().invoke(main, ["train", "--task", "random-mask", "--task-arg", f"fill={fill}"])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"Error: random-mask: parameter 'fill' is '{fill}'; allowed: gray, black."]


# the package's random-mask with these fills on 8 CIFAR images at seed 7, prepared for tiny_vit (mean 0.5), as
# tests/test_draw_apply.py measures: noise from before the draw/apply split, mean from before the fills left
PACKAGE_GAVE = {
    "noise": {"state_sum": 11269.547880717088, "state_sq": 7027.79016212448, "mask": "6fbf9920ef20660c"},
    "mean": {"state_sum": 10061.801746525336, "state_sq": 5042.183480304008, "mask": "6fbf9920ef20660c"},
}


@pytest.mark.parametrize("fill", PACKAGE_GAVE)
def test_the_study_task_gives_what_the_package_gave(study_task, fill):
    task = state_adapter(create_pretext(study_task, fill=fill), tiny_vit())
    found = fingerprint(task.prepare()(cifar_batch(8), torch.Generator().manual_seed(7)))
    assert found == {
        k: pytest.approx(v, rel=1e-5) if isinstance(v, float) else v for k, v in PACKAGE_GAVE[fill].items()
    }
