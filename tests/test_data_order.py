"""Pretraining and fine-tuning take their images in a seeded shuffled order. The embedded sample lists its images class
by class, so an unshuffled epoch feeds one class per batch: a fine-tune from random init then stays at chance (seed 0
did, through a seed passed in the sampler's `shuffle` place)."""

import pytest
import torch
from tiny_trainers import tiny_trainer

from pretexts.engine import FinetuneConfig, Finetuner
from pretexts.engine.data.labelled_data import labels_of
from pretexts.engine.data.loader import EpochSampler
from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.loop import Pretrainer


def epoch_order(trainer) -> list[int]:
    trainer.sampler.set_position(0)
    return [index for _, index in trainer.sampler]


def pretrainer(tmp_path, seed):
    cfg = PretrainConfig(data="sample", backbone="vit_tiny", batch_size=16, workers=0, seed=seed, out=str(tmp_path))
    return Pretrainer(cfg)


def finetuner(tmp_path, seed):
    cfg = FinetuneConfig(
        from_scratch=True, backbone="vit_tiny", data="sample", batch_size=16, workers=0, seed=seed, out=str(tmp_path)
    )
    return Finetuner(cfg, echo=lambda line: None)


@pytest.mark.parametrize("build", [pretrainer, finetuner], ids=["pretrain", "finetune"])
def test_every_seed_shuffles_and_each_seed_its_own_way(tmp_path, build):
    orders = {seed: epoch_order(build(tmp_path / f"s{seed}", seed)) for seed in (0, 1)}
    for order in orders.values():
        assert sorted(order) != order and len(set(order)) == len(order)
    assert orders[0] != orders[1]
    assert epoch_order(build(tmp_path / "again", 0)) == orders[0]


def test_a_fine_tunes_first_batch_mixes_classes(tmp_path):
    trainer = finetuner(tmp_path, seed=0)
    images = trainer.train_set
    labels = [labels_of(images.source)[images.indices[i]] for i in epoch_order(trainer)[:16]]
    assert len(set(labels)) >= 4, labels  # 10 classes; one class per batch was the failure


def test_the_sampler_takes_shuffle_and_seed_by_keyword_only():
    with pytest.raises(TypeError):
        EpochSampler(list(range(8)), 1, 0, 0)


def test_consecutive_steps_draw_new_corruptions_for_the_same_images(tmp_path, real_images):
    """Each optimiser step seeds its own corruption (masks, noise, permutations): the same images seen at two
    consecutive steps are corrupted differently, and a step taken again at the same count draws the same ones (what a
    resumed run relies on)."""
    trainer = tiny_trainer(tmp_path, backbone="test_convnext", img_size=32, task="random-mask")
    drawn = []
    corrupt = trainer.method.corrupt

    def recorded(images, generator):
        sample = corrupt(images, generator)
        drawn.append(sample.state.detach().clone())
        return sample

    trainer.method.corrupt = recorded
    images = real_images[:4]
    trainer.train_step(images)
    trainer.train_step(images)
    assert not torch.equal(drawn[0], drawn[1]), "two steps drew the same corruption of the same images"
    trainer.global_step = 0
    trainer.train_step(images)
    assert torch.equal(drawn[2], drawn[0])
