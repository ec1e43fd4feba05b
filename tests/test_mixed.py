"""The mixture of pixel tasks (paper, Section 4.2, Table 3)."""

import pytest
import torch

from pretexts import ParameterError, create_pretext
from pretexts.tasks.mixed import DEFAULT_TASKS


def test_default_is_the_papers_four_families():
    assert DEFAULT_TASKS == ("random-mask", "super-resolution", "denoising", "colorization")


def test_each_task_is_drawn_about_equally_often():
    task = create_pretext("mixed")
    images = torch.rand(2000, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    sample = task(images, torch.Generator().manual_seed(0))
    counts = torch.bincount(sample.info["task"], minlength=len(DEFAULT_TASKS)).float() / len(images)
    assert (counts - 1 / len(DEFAULT_TASKS)).abs().max() < 0.04, counts  # 4.5 sigma at n = 2000
    assert set(sample.info["parts"]) == set(range(len(DEFAULT_TASKS)))


def test_each_image_is_corrupted_by_its_own_task():
    task = create_pretext("mixed", tasks="colorization,denoising")
    images = torch.rand(64, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    sample = task(images, torch.Generator().manual_seed(0))
    gray = sample.info["task"] == 0
    assert 0 < gray.sum() < 64
    state = sample.state
    assert torch.equal(state[gray], create_pretext("colorization")(images[gray]).state)
    assert (state[gray][:, 0] == state[gray][:, 1]).all()
    assert len(sample.info["parts"][1]["gamma"]) == (~gray).sum()
    assert not (state[~gray][:, 0] == state[~gray][:, 1]).all()


def test_presets_of_sub_tasks():
    task = create_pretext("mixed", tasks=("random-mask:small", "super-resolution"))
    assert task.subtasks[0].count == 75


def test_sub_task_parameters_after_the_name():
    task = create_pretext(
        "mixed",
        tasks="random-mask:small:count=3,super-resolution:scale=4,gridded-mask:grid=4:ratio=0.5:fill=gray",
        fill="black",
    )
    masks, resolution, grid = task.subtasks
    assert (masks.count, masks.low, masks.fill) == (3, 0.01, "black")  # the preset, then the entry's own values
    assert resolution.scale == 4 and (grid.grid, grid.ratio, grid.fill) == (4, 0.5, "gray")  # its own fill wins
    images = torch.rand(64, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    sample = task(images, torch.Generator().manual_seed(0))
    assert sample.info["parts"][1]["low"].shape[-1] == 8  # 32 px at scale 4


def test_a_sub_task_that_does_not_fit_the_images_is_refused_in_one_line():
    task = create_pretext("mixed", tasks="denoising,super-resolution:scale=16")
    with pytest.raises(
        ParameterError,
        match=r"^super-resolution: scale 16 leaves 2x2 low-resolution pixels at 32 px; "
        r"use scale <= 8",
    ):
        task(torch.rand(8, 3, 32, 32), torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    "tasks, message",
    [
        ("patch-sorting,denoising", "only pixel tasks can be mixed; 'patch-sorting'"),
        ("denoisng", "unknown pretext task 'denoisng'.*denoising"),
        ("random-mask:huge", "unknown preset 'huge'"),
        ("mixed", "cannot mix 'mixed' into itself"),
        (
            "super-resolution:scal=4",
            r"^mixed: parameter 'tasks': super-resolution: unknown parameter 'scal'; valid "
            r"parameters: scale\. Did you mean: scale\?$",
        ),
        ("super-resolution:scale=0", "super-resolution: parameter 'scale' is 0; allowed range is"),
        ("random-mask:small:large", "'random-mask:small:large' is not NAME, NAME:PRESET or NAME:KEY=VALUE"),
        ("denoising:=1", "'denoising:=1' is not NAME"),
    ],
)
def test_bad_task_lists_are_clear_errors(tasks, message):
    with pytest.raises(ParameterError, match=message):
        create_pretext("mixed", tasks=tasks)
