"""SimMIM hides what it masks on every stem: the masked pixels are blanked in the input as well as replaced by the
mask token at the stem's cells, so a ResNet or RegNet, whose stem cells overlap, cannot read them through the
visible cells beside them. At random init, changing only the pixels under the mask leaves the prediction as it is."""

import pytest
import torch
from cli_runs import one_torch_thread  # noqa: F401 (autouse: one torch thread)

from pretexts.backbones import create_backbone
from pretexts.backbones.normalisation import normalisation
from pretexts.engine.methods.simmim_model import SimMIMModel, mask_patch_size, random_mask
from pretexts.engine.modules.decoders import PyramidDecoder


def simmim(name: str, img_size: int = 32) -> SimMIMModel:
    """As `--method simmim` builds it: the pyramid decoder where the last map is 1x1."""
    torch.manual_seed(0)
    backbone = create_backbone(name, img_size=img_size)
    mean, std = normalisation(backbone)
    return SimMIMModel(backbone, img_size, mean, std, lambda: PyramidDecoder(backbone, img_size, 32))


# resnet18 and regnetx_002: stems wider than their stride (7x7 conv + 3x3 max-pool, 3x3/2); the others patchify
@pytest.mark.parametrize("name", ["test_resnet", "resnet18", "regnetx_002", "test_vit", "test_convnext", "swin_t"])
def test_the_pixels_under_the_mask_do_not_reach_the_prediction(name):
    model = simmim(name).train()
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(2, 3, 32, 32, generator=generator)
    stride = model.stem_stride
    mask = random_mask(2, 32, stride, mask_patch_size(32, stride), 0.6, generator, "cpu")
    pixels = mask.repeat_interleave(stride, 1).repeat_interleave(stride, 2).unsqueeze(1)
    other = images * (1 - pixels) + torch.rand(images.shape, generator=generator) * pixels  # masked pixels alone
    assert not torch.equal(images, other)
    with torch.no_grad():
        torch.manual_seed(1)  # the same stochastic depth in both (Swin's)
        first, loss = model(images, mask)
        torch.manual_seed(1)
        second, _ = model(other, mask)
    assert torch.equal(first, second)
    assert torch.isfinite(loss)


def test_the_visible_pixels_still_reach_the_prediction():
    """The blank covers the mask alone: a visible pixel changed moves the prediction on a ResNet."""
    model = simmim("test_resnet").eval()
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(2, 3, 32, 32, generator=generator)
    mask = random_mask(2, 32, model.stem_stride, 4, 0.6, generator, "cpu")
    visible = 1 - mask.repeat_interleave(4, 1).repeat_interleave(4, 2).unsqueeze(1)
    with torch.no_grad():
        moved = (model(images, mask)[0] - model(images * (1 - visible) + visible * 0.5, mask)[0]).abs().max()
    assert moved > 1e-4
