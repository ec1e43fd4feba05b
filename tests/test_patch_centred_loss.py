"""The energy method's patch-centred loss: a colour shift of a patch earns nothing, structure inside it does."""

import pytest
import torch
import torch.nn.functional as F

import pretexts
from pretexts.engine import restoration_loss
from pretexts.engine.methods.energy.method import EnergyMethod
from pretexts.engine.training.config import PretrainConfig
from pretexts.errors import ParameterError


def shifted_per_patch(images: torch.Tensor, patch: int, generator: torch.Generator) -> torch.Tensor:
    """`images` plus one random offset per patch and channel."""
    b, c, h, w = images.shape
    offsets = torch.randn(b, c, h // patch, w // patch, generator=generator) * 0.2
    return images + offsets.repeat_interleave(patch, -2).repeat_interleave(patch, -1)


def test_a_colour_shift_per_patch_costs_nothing_and_structure_costs_its_centred_error(real_images):
    generator = torch.Generator().manual_seed(0)
    shifted = shifted_per_patch(real_images, 4, generator)
    assert restoration_loss([shifted], real_images) > 0.01  # the eq. 5 loss pays for it
    assert restoration_loss([shifted], real_images, "patch-centred", patch=4) < 1e-12
    # offsets per 4-pixel patch are not constant over 8-pixel ones: only the 4-pixel loss forgives them
    assert restoration_loss([shifted], real_images, "patch-centred", patch=8) > 1e-3

    noise = torch.randn(real_images.shape, generator=generator) * 0.1
    centred = noise - F.avg_pool2d(noise, 4).repeat_interleave(4, -2).repeat_interleave(4, -1)
    loss = restoration_loss([real_images + noise], real_images, "patch-centred", patch=4)
    assert loss == pytest.approx(centred.square().mean().item(), rel=1e-5)
    assert 0.5 * noise.square().mean() < loss < noise.square().mean()  # 15 of 16 degrees of freedom are left


def energy_method(backbone: str, task: str = "random-mask", **method_args) -> EnergyMethod:
    cfg = PretrainConfig(backbone=backbone, img_size=32, method_args={"loss": "patch-centred", **method_args})
    return EnergyMethod(cfg, pretexts.create_pretext(task), torch.device("cpu"))


@pytest.mark.parametrize(("backbone", "patch"), [("vit_tiny", 4), ("resnet18", 8)])
def test_the_patch_is_the_vits_else_8_pixels_and_the_loss_reaches_the_backbone(backbone, patch, real_images):
    torch.manual_seed(0)
    method = energy_method(backbone)
    model = method.setup()
    assert method.loss_patch == patch
    method.loss(method.task(real_images[:4], torch.Generator().manual_seed(0))).backward()
    first = next(p for p in model.backbone.parameters() if p.ndim > 1)
    assert first.grad is not None and first.grad.abs().sum() > 0


@pytest.mark.slow
def test_the_loss_falls_on_real_images(real_images):
    torch.manual_seed(0)
    method = energy_method("convnext_atto")
    model = method.setup()
    sample = method.task(real_images, torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(30):
        loss = method.loss(sample)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.9 * losses[0], losses


def test_a_state_that_is_not_an_image_or_a_patch_that_does_not_divide_it_is_refused():
    with pytest.raises(ParameterError, match="use loss=mse"):
        energy_method("vit_tiny", task="patch-sorting").setup()
    with pytest.raises(ParameterError, match="loss_patch=5 must divide the image size 32"):
        energy_method("resnet18", loss_patch=5).setup()


@pytest.mark.parametrize(
    ("backbone", "task", "loss", "patch"),
    [
        ("vit_tiny", "random-mask", "patch-centred", 4),
        ("vit_tiny", "gridded-mask", "patch-centred", 4),
        ("vit_tiny", "colorization", "mse", None),  # centring would drop the colour the task restores
        ("vit_tiny", "patch-sorting", "mse", None),  # a state of positions, not an image
        ("convnext_atto", "random-mask", "mse", None),
        ("resnet18", "random-mask", "mse", None),
    ],
)
def test_the_default_loss_is_patch_centred_for_a_vit_with_a_masking_task_else_mse(
    backbone, task, loss, patch, real_images
):
    task_args = {"edge_max": 1} if task == "patch-sorting" else {}  # 2 would blank vit_tiny's 4-pixel patches
    cfg = PretrainConfig(backbone=backbone, img_size=32, task=task, task_args=task_args)
    method = EnergyMethod(cfg, pretexts.create_pretext(task, **task_args), torch.device("cpu"))
    assert method.args["loss"] == "auto"
    torch.manual_seed(0)
    model = method.setup()
    assert (method.args["loss"], method.loss_patch) == (loss, patch)
    method.loss(method.task(real_images[:4], torch.Generator().manual_seed(0))).backward()
    first = next(p for p in model.backbone.parameters() if p.ndim > 1)
    assert first.grad is not None and first.grad.abs().sum() > 0


def test_a_given_loss_is_kept_on_a_vit():
    cfg = PretrainConfig(backbone="vit_tiny", img_size=32, method_args={"loss": "mse"})
    method = EnergyMethod(cfg, pretexts.create_pretext("random-mask"), torch.device("cpu"))
    method.setup()
    assert (method.args["loss"], method.loss_patch) == ("mse", None)
