"""SimMIM as microsoft/SimMIM does it: the mask token replaces the stem's output only at masked positions, the L1
loss reads masked pixels only, 60 % of 32-px patches at 224 px scaled with the image, on ViT, Swin, ConvNeXt and
ResNet alike."""

import math

import pytest
import timm
import torch

from pretexts import create_pretext
from pretexts.backbones import create_backbone
from pretexts.engine import PretrainConfig
from pretexts.engine.methods.simmim import SimMIMMethod
from pretexts.engine.methods.simmim_model import SimMIMModel, mask_patch_size, random_mask

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
# (backbone, image size): every family's stem; at 64 px the hierarchical ones still have a 2x2 last map
FAMILIES = [("vit_tiny", 32), ("convnext_atto", 64), ("resnet18", 64), ("swin_t", 64)]


def build(name: str, img_size: int) -> SimMIMModel:
    kwargs = {"window_size": 2} if name == "swin_t" else {}
    backbone = create_backbone(name, img_size=img_size, **kwargs)
    return SimMIMModel(backbone, img_size, *IMAGENET)


def a_mask(model: SimMIMModel, img_size: int, seed: int = 0, batch: int = 2) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return random_mask(
        batch, img_size, model.stem_stride, mask_patch_size(img_size, model.stem_stride), 0.6, generator, "cpu"
    )


def stem_output(model: SimMIMModel, images: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """What the encoder's first block receives: the stem's output after the mask token hook."""
    seen = {}
    handle = model.stem.register_forward_hook(lambda m, i, o: seen.update(out=o.detach().clone()))
    with torch.no_grad():
        model.predict((images - model.mean) / model.std, mask)
    handle.remove()
    out = seen["out"]
    if model.layout == "nlc":
        side = math.isqrt(out.shape[1])
        return out.transpose(1, 2).reshape(out.shape[0], -1, side, side)
    return out.permute(0, 3, 1, 2) if model.layout == "nhwc" else out


@pytest.mark.parametrize("name,img_size", FAMILIES)
def test_the_mask_token_replaces_the_stem_output_only_at_masked_cells(name, img_size):
    torch.manual_seed(0)
    model = build(name, img_size).eval()
    images = torch.rand(2, 3, img_size, img_size)
    mask = a_mask(model, img_size)
    plain, masked = stem_output(model, images, None), stem_output(model, images, mask)
    cells = mask.bool().unsqueeze(1).expand_as(plain)
    assert torch.equal(masked[~cells], plain[~cells])  # visible cells untouched
    token = model.mask_token.detach().view(1, -1, 1, 1).expand_as(plain)
    assert torch.allclose(masked[cells], token[cells])  # every masked cell is the token itself
    assert model.stem_stride == 4


@pytest.mark.parametrize("name,img_size", FAMILIES)
def test_prediction_covers_the_image_and_the_loss_reaches_backbone_and_token(name, img_size):
    torch.manual_seed(0)
    model = build(name, img_size).train()
    images = torch.rand(2, 3, img_size, img_size)
    prediction, loss = model(images, a_mask(model, img_size))
    assert prediction.shape == images.shape and torch.isfinite(loss)
    loss.backward()
    first = next(p for p in model.backbone.parameters() if p.ndim > 1)
    assert first.grad is not None and first.grad.abs().sum() > 0
    assert model.mask_token.grad.abs().sum() > 0


def test_the_loss_reads_masked_pixels_only(monkeypatch):
    """Changing the prediction at visible pixels leaves the loss as it is; at a masked one it moves it. The value
    is SimMIM's: mean absolute error over masked pixels and channels of the normalised image."""
    model = build("vit_tiny", 32)
    images = torch.rand(2, 3, 32, 32)
    mask = a_mask(model, 32)
    pixels = mask.repeat_interleave(4, 1).repeat_interleave(4, 2).unsqueeze(1).expand(-1, 3, -1, -1).bool()
    guess = torch.randn(2, 3, 32, 32)
    monkeypatch.setattr(model, "predict", lambda normalised, m: guess.clone())
    _, loss = model(images, mask)
    target = (images - model.mean) / model.std
    assert loss.item() == pytest.approx((guess - target).abs()[pixels].mean().item(), rel=1e-4)
    guess[~pixels] += 10.0
    assert model(images, mask)[1].item() == pytest.approx(loss.item(), rel=1e-6)
    guess[pixels] += 10.0
    assert model(images, mask)[1].item() > loss.item() + 1.0


@pytest.mark.parametrize("img_size,expected", [(224, 32), (192, 24), (32, 4), (64, 8)])
def test_mask_patches_are_32px_at_224_scaled_with_the_image(img_size, expected):
    assert mask_patch_size(img_size, 4) == expected


def test_the_mask_draws_ceil_ratio_patches_per_image_from_the_generator():
    model = build("vit_tiny", 32)
    mask = a_mask(model, 32, seed=3, batch=4)
    assert mask.shape == (4, 8, 8)  # stem cells: 32 px / patch 4
    assert (mask.sum((1, 2)) == math.ceil(64 * 0.6)).all()  # data_simmim.py's MaskGenerator: ceil
    assert torch.equal(mask, a_mask(model, 32, seed=3, batch=4))
    assert not torch.equal(mask, a_mask(model, 32, seed=4, batch=4))
    coarse = random_mask(2, 64, 4, 16, 0.6, torch.Generator().manual_seed(0), "cpu")
    blocks = coarse.view(2, 4, 4, 4, 4)  # 16-px mask patches are 4x4 blocks of stem cells, all alike
    assert torch.equal(blocks.amax((2, 4)), blocks.amin((2, 4)))


def test_the_official_light_head_where_the_last_map_has_room():
    """A 1x1 convolution to stride^2 x 3 channels and a pixel shuffle at the encoder's stride."""
    model = build("convnext_atto", 64)
    conv, shuffle = model.decoder
    assert model.stride == 32 and conv.kernel_size == (1, 1) and conv.out_channels == 32 * 32 * 3
    assert isinstance(shuffle, torch.nn.PixelShuffle) and shuffle.upscale_factor == 32


def test_a_wrong_family_is_refused_by_name():
    with pytest.raises(ValueError, match="ViT, Swin, ConvNeXt or ResNet"):
        SimMIMModel(timm.create_model("mobilenetv3_small_050", num_classes=0), 32, *IMAGENET)


def test_the_simmim_recipe_is_the_official_pretraining_config():
    cfg = PretrainConfig(method="simmim", recipe="simmim", batch_size=512)
    assert cfg.peak_lr == pytest.approx(1e-4)  # BASE_LR 1e-4 at a total batch of 512
    assert cfg.betas == (0.9, 0.999) and cfg.weight_decay == 0.05 and cfg.clip_grad == 5.0
    assert PretrainConfig(method="simmim", recipe="simmim", clip_grad=1.0).clip_grad == 1.0  # explicit wins
    assert PretrainConfig(recipe="paper").clip_grad is None


@pytest.mark.parametrize("ratio,masked", [(0.3, 20), (0.85, 55)])  # ceil(ratio * 64) of the 4-px patches at 32 px
def test_the_methods_mask_ratio_is_the_share_of_patches_each_image_hides(ratio, masked):
    """`--method-arg mask_ratio` reaches the masks the method trains on, not SimMIM's default 0.6."""
    torch.manual_seed(0)
    cfg = PretrainConfig(method="simmim", backbone="test_convnext", img_size=32, method_args={"mask_ratio": ratio})
    method = SimMIMMethod(cfg, create_pretext(cfg.task), torch.device("cpu"))  # as a run builds it
    method.setup()
    sample = method.corrupt(torch.rand(4, 3, 32, 32), torch.Generator().manual_seed(0))
    assert sample.mask.shape == (4, 8, 8) and (sample.mask.sum((1, 2)) == masked).all()
    assert torch.isfinite(method.loss(sample))
