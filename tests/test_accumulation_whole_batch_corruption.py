"""--accum-iter K takes the whole batch's step: the batch is corrupted once and split, so every task (a plugin's
too) and every method gives step 1 the same loss and the same gradient as --accum-iter 1. (The gradient, not the
updated weights: AdamW's first update is about lr * sign(g), so an element whose gradient is near 0 turns a
rounding difference into an lr-sized one.)"""

import pytest
import torch
from pretrained_checkpoints import single_thread  # noqa: F401 (a fixture)

from pretexts import Corrupted, Param, Pretext
from pretexts.base import uniform
from pretexts.engine import PretrainConfig, Pretrainer
from pretexts.engine.training.optimizer_step import split_sample
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")


class TwoDraws(Pretext):
    """A plugin that draws for the whole batch twice (a factor per image, then noise), as denoising does."""

    name = "two-draws-plugin"
    params = {"low": Param(0.2, float, 0.0, 1.0)}

    def draw(self, images, generator=None):
        factor = uniform((images.shape[0],), self.low, 1.0, generator, images.device)
        noise = torch.rand(images.shape, generator=generator, device=images.device)
        return {"factor": factor, "noise": noise}

    def apply(self, images, params):
        state = images * params["factor"].view(-1, 1, 1, 1) + 0.1 * params["noise"]
        return Corrupted(state=state, target=images, info=params)


@pytest.fixture
def two_draws_registered(monkeypatch):
    """The plugin registered for one test: the registry as it was after it (other files list every task)."""
    from pretexts.registry import TASKS

    TASKS.load()
    monkeypatch.setitem(TASKS.table, TwoDraws.name, TwoDraws)


CASES = {
    **{
        task: {"task": task}
        for task in ("random-mask", "gridded-mask", "denoising", "super-resolution", "colorization")
    },
    "mixed": {"task": "mixed"},
    "patch-sorting": {"task": "patch-sorting", "backbone": "test_vit"},
    "plugin": {"task": TwoDraws.name},
    "ae": {"method": "ae"},
    "mae": {"method": "mae", "backbone": "test_vit"},
    "simmim": {"method": "simmim", "backbone": "test_vit"},
}


def first_step(tmp_path, accum_iter: int, settings: dict) -> tuple[float, dict]:
    """Step 1's loss and the gradient the optimiser steps with."""
    cfg = PretrainConfig(
        **{"backbone": "test_convnext", **settings},
        img_size=32,
        device="cpu",  # float32: two micro-batches round as the whole batch does, to 1e-5
        batch_size=8,
        accum_iter=accum_iter,
        epochs=1,
        max_steps_per_epoch=1,
        warmup_epochs=0.0,
        lr=1e-3,
        workers=0,
        monitor_every=0,
        eval_images=8,
        figure_images=2,
        out=str(tmp_path / f"accum{accum_iter}"),
    )
    trainer = Pretrainer(cfg)
    for module in trainer.model.modules():  # BatchNorm sees micro-batch statistics (documented), as in timm/MAE
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.eval()
    grads = {}

    def keep_gradient(optimizer, args, kwargs):  # what the optimiser is given: the accumulated gradient
        grads.update({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})

    trainer.optimizer.register_step_pre_hook(keep_gradient)
    images = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    stats = trainer.train_step(images)
    return stats["loss"], grads


@pytest.mark.parametrize("case", list(CASES))
def test_two_micro_batches_take_the_whole_batch_step(tmp_path, case, two_draws_registered):
    settings = CASES[case]
    whole_loss, whole = first_step(tmp_path, 1, settings)
    split_loss, split = first_step(tmp_path, 2, settings)
    assert split_loss == pytest.approx(whole_loss, rel=1e-5)
    assert split.keys() == whole.keys() and any(g.abs().sum() > 0 for name, g in whole.items() if "backbone" in name)
    for key in whole:
        torch.testing.assert_close(split[key], whole[key], rtol=1e-4, atol=1e-7, msg=key)


def test_a_sample_splits_every_batch_first_tensor_and_shares_the_rest():
    sample = Corrupted(
        state=torch.arange(6.0).view(6, 1),
        target=torch.zeros(6, 2),
        info={"mask": torch.ones(6, 3, dtype=torch.bool), "count": 4, "table": torch.zeros(2, 2), "tasks": ("a",)},
    )
    first, second = split_sample(sample, 6, 2)
    assert first.state.flatten().tolist() == [0, 1, 2] and second.state.flatten().tolist() == [3, 4, 5]
    assert first.info["mask"].shape == (3, 3) and first.info["count"] == 4 and first.info["tasks"] == ("a",)
    assert first.info["table"].shape == (2, 2) and first.context is None
    assert split_sample(sample, 6, 1) == [sample]
    parts = split_sample((torch.zeros(5), "shared"), 5, 4)  # as torch.chunk: 2, 2 and 1 images
    assert [len(part[0]) for part in parts] == [2, 2, 1] and {part[1] for part in parts} == {"shared"}


def test_a_sample_with_no_batch_first_tensor_is_refused_rather_than_run_whole_in_each_part():
    class Opaque:  # a plugin method's own sample type: split_sample cannot look inside it
        def __init__(self, images):
            self.images = images

    with pytest.raises(ParameterError, match=r"--accum-iter 2: the method's sample \(Opaque\) holds no tensor"):
        split_sample(Opaque(torch.zeros(6, 3)), 6, 2)
    assert split_sample(Opaque(torch.zeros(6, 3)), 6, 1)[0].images.shape == (6, 3)
