"""The energy method's figure: the raw restoration (the paper's, every pixel moved) and, for a masking task, the
same last step with the known pixels put back, labelled and measured, so its noise off the boxes is not mistaken
for the restoration's quality."""

import pytest
import torch
import torch.nn.functional as F

from pretexts import create_pretext
from pretexts.engine.methods.energy import figure_columns, restoration_error
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.energy.restore import restore
from pretexts.engine.methods.states import state_adapter
from pretexts.engine.training.figures import restoration_figure, stacked

KEPT = "step 2, known pixels kept"


@pytest.fixture(scope="module")
def model():
    # the first command's backbone (test_convnext's normalisation mean is the gray fill: zero-variance tokens)
    torch.manual_seed(0)
    return create_energy_model("convnext_atto", img_size=32, alpha=1.0).eval()


def corrupted_again(model, task, images, seed=0):
    """The figure's seeded sample and its raw restoration, drawn again."""
    sample = task(images, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return sample, restore(model, task, sample, 2)


@pytest.mark.parametrize("name", ["random-mask", "gridded-mask"])
def test_a_masking_figure_shows_the_last_step_with_the_known_pixels_kept(name, model, held_out_images):
    task = state_adapter(create_pretext(name), model).prepare()
    images = held_out_images[:8]
    columns = figure_columns(model, task, images, 2)
    assert list(columns) == ["corrupted", "step 1", "step 2", KEPT, "original"]
    sample, states = corrupted_again(model, task, images)
    masked = sample.info["mask"].unsqueeze(1).expand_as(images)
    kept, raw = columns[KEPT], columns["step 2"]
    # the raw step is the paper's: it moves the visible pixels too, and the figure still shows it as it is
    assert torch.equal(raw, states[-1].clamp(0, 1))
    assert (raw[~masked] - images[~masked]).abs().max() > 1e-3
    # the kept column: the corrupted input's visible pixels exactly, the last step's in the boxes
    assert torch.equal(kept[~masked], images[~masked])
    assert torch.equal(kept[masked], raw[masked])


def test_the_report_and_the_title_measure_the_kept_restoration(model, held_out_images):
    task = state_adapter(create_pretext("random-mask"), model).prepare()
    batches = [held_out_images[:8], held_out_images[8:16]]
    held = restoration_error(model, task, batches, 2, "cpu", seed=1)
    generator, expected = torch.Generator().manual_seed(1), []
    for images in batches:
        sample = task(images, generator)
        with torch.no_grad():
            last = restore(model, task, sample, 2)[-1]
        known = ~sample.info["mask"].unsqueeze(1)
        expected.append(F.mse_loss(torch.where(known, sample.state, last), images).item())
    kept = held.to_dict()["known_kept_mse"]
    assert kept == pytest.approx(sum(expected) / 2, rel=1e-5)
    assert kept < held.restored_mse[-1]  # the visible pixels' error is gone, the boxes' is the same
    assert held.format().count("known") == 0  # the printed held-out line is the paper's whole-image number
    assert f"restored {held.restored_mse[-1]:.4f} (known pixels kept {kept:.4f}), trivial " in held.figure_numbers()


@pytest.mark.parametrize("name", ["super-resolution", "denoising"])
def test_a_task_that_corrupts_every_pixel_has_no_kept_column(name, model, held_out_images):
    task = state_adapter(create_pretext(name), model).prepare()
    columns = figure_columns(model, task, held_out_images[:8], 2)
    assert list(columns) == ["corrupted", "step 1", "step 2", "original"]
    held = restoration_error(model, task, [held_out_images[:8]], 2, "cpu")
    assert "known_kept_mse" not in held.to_dict() and "known" not in held.figure_numbers()


def test_the_figure_draws_the_kept_column(model, held_out_images, tmp_path):
    task = state_adapter(create_pretext("random-mask"), model).prepare()
    path = tmp_path / "figure.png"
    restoration_figure(figure_columns(model, task, held_out_images[:2], 2), path, "title")
    assert path.stat().st_size > 0


def test_a_column_stacks_its_images_in_order_with_white_gaps():
    images = torch.rand(3, 3, 32, 32) * 0.9  # below white, so a gap row is told apart from an image row
    column = torch.from_numpy(stacked(images))
    assert column.shape == (3 * 32 + 2 * 2, 32, 3)
    for i in range(3):
        assert torch.equal(column[i * 34 : i * 34 + 32], images[i].permute(1, 2, 0))
    assert (column[32:34] == 1).all() and (column[66:68] == 1).all()
