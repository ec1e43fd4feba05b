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


@pytest.mark.parametrize("tasks, message", [
    ("patch-sorting,denoising", "only pixel tasks can be mixed; 'patch-sorting'"),
    ("denoisng", "unknown pretext task 'denoisng'.*denoising"),
    ("random-mask:huge", "unknown preset 'huge'"),
    ("mixed", "cannot mix 'mixed' into itself"),
])
def test_bad_task_lists_are_clear_errors(tasks, message):
    with pytest.raises(ParameterError, match=message):
        create_pretext("mixed", tasks=tasks)
