"""Every mask fill starts training with a finite, ordinary loss on the CPU backbones (the energy method at init).

A fill equal to the normalisation mean is the trap the gray fill's nudge avoids: after normalisation the box is
all zeros, ConvNeXt's post-stem LayerNorm sees zero-variance tokens, and the loss at init explodes."""

import pytest
import torch

import pretexts
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.energy.restore import restoration_loss, restore
from pretexts.engine.methods.states import state_adapter
from pretexts.tasks.masking import FILLS, IMAGENET_MEAN, NEAR_MEAN

BACKBONES = ["convnext_atto", "vit_tiny", "resnet18"]  # vit_tiny: the alias, patch 4 at 32 px


@pytest.fixture(scope="module")
def models():
    built = {}
    for name in BACKBONES:
        torch.manual_seed(0)
        built[name] = create_energy_model(name, img_size=32).train()
    return built


def init_loss(model, task, sample) -> float:
    return restoration_loss(restore(model, task, sample, steps=2), sample.target).item()


@pytest.mark.parametrize("name", BACKBONES)
def test_every_fill_gives_a_finite_ordinary_loss_at_init(name, models, real_images):
    model, images = models[name], real_images[:4]
    losses = {}
    for fill in FILLS:
        task = state_adapter(pretexts.create_pretext("random-mask", fill=fill), model).prepare()
        losses[fill] = init_loss(model, task, task(images, torch.Generator().manual_seed(0)))
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values()), losses
    assert all(v < 100 and v < 10 * losses["black"] for v in losses.values()), losses


def test_a_fill_of_the_normalisation_mean_explodes_convnext_and_the_nudged_one_does_not(models, real_images):
    model, images = models["convnext_atto"], real_images[:4]
    task = state_adapter(pretexts.create_pretext("random-mask", fill="black"), model).prepare()
    sample = task(images, torch.Generator().manual_seed(0))
    mask = sample.info["mask"].unsqueeze(1)
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)

    def loss_with(colour):
        sample.state = torch.where(mask, colour.expand_as(images), images)
        return init_loss(model, task, sample)

    assert not loss_with(mean) < 1e3  # measured 2.3e8 (5.5e8 in training): zero-variance tokens
    assert loss_with(mean + NEAR_MEAN) < 1  # where the nudge puts such a fill: an ordinary loss


def test_gray_is_moved_off_a_normalisation_mean_of_one_half(real_images):
    # timm's test_convnext normalises with mean 0.5 (as Inception-style configs do): a 0.5 box would be all zeros
    # after normalisation, the trap above; the gray fill moves to 0.52 for it and stays 0.5 for ImageNet's mean
    torch.manual_seed(0)
    model = create_energy_model("test_convnext", img_size=32).train()
    images = real_images[:4]
    task = state_adapter(pretexts.create_pretext("random-mask", fill="gray"), model).prepare()
    assert task.norm_mean == pytest.approx((0.5, 0.5, 0.5))
    sample = task(images, torch.Generator().manual_seed(0))
    mask = sample.info["mask"].unsqueeze(1).expand_as(images)
    assert torch.allclose(sample.state[mask], torch.tensor(0.5 + NEAR_MEAN))
    assert init_loss(model, task, sample) < 10  # 5.8e4 with the box at 0.5
    imagenet = state_adapter(
        pretexts.create_pretext("random-mask", fill="gray"), create_energy_model("convnext_atto", img_size=32)
    ).prepare()
    assert (imagenet(images, torch.Generator().manual_seed(0)).state[mask] == 0.5).all()
