"""SimMIM (Xie et al., CVPR 2022) on any timm backbone: a learnable mask token replaces the stem's output at
masked positions, the encoder sees every position, a light head predicts the pixels, L1 on masked pixels only.

Read from microsoft/SimMIM (models/simmim.py, data/data_simmim.py), written for timm's families:
- ViT and Swin: the token replaces the patch embedding (`patch_embed`'s output), as in the official code;
- ConvNeXt and ResNet: it replaces the stem's output grid (ConvNeXt's `stem`, ResNet's `maxpool`), one C-vector
  per masked cell, as SimMIM's follow-ups on CNNs do (the mask is in the stem's cells, stride 4). A ResNet's or
  RegNet's stem cells overlap, so the masked pixels are also blanked in the input, where a patchify stem (ViT,
  Swin, ConvNeXt) gives the same prediction either way.
The head is the official one, a 1x1 convolution to stride^2 x 3 channels and a pixel shuffle, at the stride of
the encoder's last map. When that map is 1x1 (a hierarchical backbone at 32 px) one pixel-shuffled vector
cannot place anything, so a `decoder` given by the method predicts instead: a module from the normalised images to
the prediction that runs the backbone itself (the AE's `PyramidDecoder`, UperNet's PPM + FPN over the 4 stages);
the mask token enters through the same stem hook."""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pretexts.errors import ParameterError


def stem_module(backbone: nn.Module) -> tuple[nn.Module, str]:
    """(the module whose output the mask token replaces, that output's layout: 'nlc', 'nhwc' or 'nchw')."""
    if hasattr(backbone, "patch_embed"):  # ViT (flattened tokens), Swin (NHWC)
        embed = backbone.patch_embed
        if getattr(embed, "flatten", False):
            return embed, "nlc"
        fmt = str(getattr(embed, "output_fmt", "NCHW")).rsplit(".", 1)[-1].lower()
        return embed, fmt
    if isinstance(getattr(backbone, "stem", None), nn.Module):  # ConvNeXt
        return backbone.stem, "nchw"
    if isinstance(getattr(backbone, "maxpool", None), nn.Module) and hasattr(backbone, "conv1"):  # ResNet
        return backbone.maxpool, "nchw"
    raise ParameterError(
        f"method simmim needs a ViT, Swin, ConvNeXt or ResNet backbone (a patch_embed, stem or conv1+maxpool), "
        f"not {type(backbone).__name__}; use one (vit_tiny, convnext_atto, resnet18, ...), or --method ae or energy, "
        f"which take any backbone."
    )


def feature_map(features: Tensor, backbone: nn.Module) -> Tensor:
    """forward_features' output as a map [B, C, h, w]: prefix tokens dropped and tokens laid out (ViT), NHWC
    permuted (Swin)."""
    if features.ndim == 3:
        tokens = features[:, getattr(backbone, "num_prefix_tokens", 0) :]
        side = math.isqrt(tokens.shape[1])
        return tokens.transpose(1, 2).reshape(tokens.shape[0], -1, side, side)
    if (
        getattr(backbone, "patch_embed", None) is not None
        and features.shape[-1] == backbone.num_features
        and features.shape[1] != backbone.num_features
    ):
        return features.permute(0, 3, 1, 2)
    return features


class SimMIMModel(nn.Module):
    """backbone + mask token + head. `forward(images, mask)` -> (prediction [B,3,H,W] of the normalised images,
    the loss); `mask` [B, h, w] in the stem's cells, 1 = masked. `decoder_over_stages()`, where given, builds the
    decoder used when the encoder's last map is 1x1 (the official head needs room to place pixels)."""

    def __init__(self, backbone: nn.Module, img_size: int, mean, std, decoder_over_stages=None):
        super().__init__()
        self.backbone = backbone
        self.stem, self.layout = stem_module(backbone)
        with torch.no_grad():
            probe = {}
            handle = self.stem.register_forward_hook(lambda m, i, o: probe.update(stem=o.shape))  # returns None
            was_training = backbone.training
            backbone.eval()
            last = feature_map(backbone.forward_features(torch.zeros(1, 3, img_size, img_size)), backbone)
            backbone.train(was_training)
            handle.remove()
        shape = probe["stem"]
        channels = shape[-1] if self.layout in ("nlc", "nhwc") else shape[1]
        self.grid = math.isqrt(shape[1]) if self.layout == "nlc" else (shape[1] if self.layout == "nhwc" else shape[2])
        self.stem_stride = img_size // self.grid
        self.stride = img_size // last.shape[-1]
        self.mask_token = nn.Parameter(torch.zeros(1, 1, channels))
        nn.init.trunc_normal_(self.mask_token, std=0.02, a=-0.02, b=0.02)  # SimMIM's ViT init
        self.over_stages = decoder_over_stages is not None and last.shape[-1] == 1
        self.decoder = (
            decoder_over_stages()
            if self.over_stages
            else nn.Sequential(
                nn.Conv2d(last.shape[1], self.stride**2 * 3, kernel_size=1), nn.PixelShuffle(self.stride)
            )
        )
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self._mask: Tensor | None = None
        self.stem.register_forward_hook(self._replace_masked)

    def _replace_masked(self, module, inputs, output: Tensor) -> Tensor | None:
        """The stem's output with the mask token at the masked cells (only while a mask is set)."""
        if self._mask is None:
            return None
        w = self._mask.to(output.dtype)
        token = self.mask_token.to(output.dtype)
        if self.layout == "nlc":
            w = w.flatten(1).unsqueeze(-1)
        elif self.layout == "nhwc":
            w = w.unsqueeze(-1)
        else:
            w, token = w.unsqueeze(1), token.view(1, -1, 1, 1)
        return output * (1 - w) + token * w

    def predict(self, normalised: Tensor, mask: Tensor | None) -> Tensor:
        """The head's prediction of the normalised images, the encoder seeing the mask token at `mask` (the input's
        masked pixels as given: `forward` blanks them)."""
        self._mask = mask
        try:
            if self.over_stages:
                return self.decoder(normalised)
            return self.decoder(feature_map(self.backbone.forward_features(normalised), self.backbone))
        finally:
            self._mask = None

    def forward(self, images: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """images [B,3,H,W] in [0, 1]; the loss is SimMIM's: L1 to the normalised image on masked pixels only,
        averaged over them and the channels."""
        target = (images - self.mean) / self.std
        pixels = mask.repeat_interleave(self.stem_stride, 1).repeat_interleave(self.stem_stride, 2).unsqueeze(1)
        # the masked pixels blanked to the dataset mean (0 once normalised) as well: a stem whose cells overlap
        # (ResNet's 7x7 conv and max-pool, RegNet's 3x3/2) would show them to the visible cells next to the token
        prediction = self.predict(target * (1 - pixels.to(target.dtype)), mask)
        error = F.l1_loss(prediction.float(), target.float(), reduction="none")
        loss = (error * pixels).sum() / (pixels.sum() + 1e-5) / target.shape[1]
        return prediction, loss

    def unnormalise(self, prediction: Tensor) -> Tensor:
        return (prediction * self.std + self.mean).clamp(0, 1)


def mask_patch_size(img_size: int, stem_stride: int) -> int:
    """SimMIM's 32-px mask patches at 224 px, scaled with the image: of the multiples of the stem's stride that
    divide the image, the nearest to 32 x img_size / 224 (the smaller of two as near), so the mask tiles the image
    in whole stem cells. ParameterError where the stride does not divide the image."""
    if img_size % stem_stride:
        lower = max(stem_stride, img_size - img_size % stem_stride)
        raise ParameterError(
            f"SimMIM draws its mask in the stem's {stem_stride}-px cells, which do not tile a {img_size}-px image; "
            f"use an --img-size that is a multiple of {stem_stride} (e.g. {lower} or {lower + stem_stride})."
        )
    target = 32 * img_size / 224
    fitting = [p for p in range(stem_stride, img_size + 1, stem_stride) if img_size % p == 0]
    return min(fitting, key=lambda patch: (abs(patch - target), patch))


def random_mask(
    batch: int, img_size: int, stem_stride: int, patch: int, ratio: float, generator: torch.Generator, device
) -> Tensor:
    """[B, h, w] in stem cells: ceil(ratio x patches) random mask patches per image set to 1 (data_simmim.py's
    MaskGenerator, drawn from `generator` on `device`)."""
    if img_size % patch or patch % stem_stride:
        raise ParameterError(
            f"the mask patch {patch} must divide the image ({img_size} px) and be a multiple of the "
            f"stem's stride {stem_stride}."
        )
    side = img_size // patch
    count = math.ceil(side * side * ratio)
    order = torch.rand(batch, side * side, generator=generator, device=device).argsort(dim=1)
    mask = torch.zeros(batch, side * side, device=device)
    mask.scatter_(1, order[:, :count], 1.0)
    scale = patch // stem_stride
    return mask.view(batch, side, side).repeat_interleave(scale, 1).repeat_interleave(scale, 2)
