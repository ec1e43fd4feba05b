"""The SimMIM baseline (`--method simmim`, Xie et al. 2022) on any backbone: masked image modelling with a mask
token in the encoder's input and a light pixel head, so a ConvNeXt or ResNet has a decoder-based peer too.
SimMIM masks its own 32-px patches (scaled with the image), as MAE does: `--task` is not used."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from timm.optim import param_groups_weight_decay

from pretexts.backbones import create_backbone
from pretexts.backbones.normalisation import normalisation
from pretexts.engine.methods import register_method
from pretexts.engine.methods.base import Method
from pretexts.engine.methods.positions import POSITIONS_PARAM, StartsPositions
from pretexts.engine.methods.report import Figure, HeldOut, fill_report, with_figure_numbers
from pretexts.engine.methods.simmim_model import SimMIMModel, mask_patch_size, random_mask
from pretexts.engine.modules.decoders import PyramidDecoder
from pretexts.engine.modules.eval_mode import eval_mode
from pretexts.errors import ParameterError
from pretexts.params import Param

PYRAMID_DIM = 128  # the AE's pyramid decoder width at 32 px (engine/methods/autoencoder.py)


@dataclass
class MaskedImages:
    """Clean images [B,3,H,W] in [0, 1] and SimMIM's mask [B, h, w] in the stem's cells (1 = masked)."""

    images: torch.Tensor
    mask: torch.Tensor


@register_method("simmim")
class SimMIMMethod(StartsPositions, Method):
    """SimMIM, `--method simmim` (Xie et al. 2022, microsoft/SimMIM), on any backbone (ViT, Swin, ConvNeXt,
    ResNet): a learnable mask token replaces the stem's output at masked positions (the masked pixels are blanked
    too, so a stem whose cells overlap cannot read them), the encoder sees every position, and a light head (a 1x1
    convolution and a pixel shuffle) predicts the pixels, L1 on masked pixels only. Where the last feature map is 1x1
    (a hierarchical backbone at 32 px) a `PyramidDecoder` predicts instead.

    It draws its own masks, so `--task` is not used. Options (`--method-arg`): `mask_ratio` (0.6), `mask_patch`
    (the mask's patch side in px; 0: SimMIM's 32 px at 224 px, scaled with the image to the nearest multiple of
    the stem's stride that divides it, `mask_patch_size`), and a ViT's `positions` (auto: the fixed sin-cos table,
    as the energy method and MAE start from).
    """

    summary = (
        "SimMIM (Xie et al. 2022): a mask token at masked positions, the encoder sees all, a light head "
        "predicts their pixels, L1 (any backbone)"
    )
    method_params = {
        "mask_ratio": Param(0.6, float, 0.05, 0.95, help="share of mask patches masked (SimMIM: 0.6)"),
        "mask_patch": Param(
            0,
            int,
            0,
            4096,
            help="mask patch side in px; 0: SimMIM's 32 px at 224, scaled with the image to the nearest "
            "multiple of the stem's stride that divides it (4 px at 32 px, 24 at 192)",
        ),
        "positions": POSITIONS_PARAM,
    }
    figure_name = "reconstruction"
    uses_task = False
    # SimMIM's loss (simmim_model.py), unlike its held-out report's MSE in [0, 1] pixels
    loss_name = "masked-pixel L1 (pixels normalised by the backbone's mean and std)"

    def build_model(self) -> torch.nn.Module:
        cfg = self.cfg
        backbone = create_backbone(cfg.backbone, img_size=cfg.img_size, global_pool=cfg.global_pool)
        self.start_positions(backbone)
        mean, std = normalisation(backbone)
        # where the last map is 1x1 (a hierarchical backbone at 32 px) one pixel-shuffled vector cannot place
        # anything: UperNet's PPM + FPN over the stages (the AE's) predicts instead
        model = SimMIMModel(
            backbone, cfg.img_size, mean, std, lambda: PyramidDecoder(backbone, cfg.img_size, PYRAMID_DIM)
        )
        self.patch = self.args["mask_patch"] or mask_patch_size(cfg.img_size, model.stem_stride)
        if cfg.img_size % self.patch or self.patch % model.stem_stride:
            raise ParameterError(
                f"method simmim: mask_patch {self.patch} must divide the image ({cfg.img_size} px) and "
                f"be a multiple of the stem's stride {model.stem_stride}; e.g. mask_patch="
                f"{mask_patch_size(cfg.img_size, model.stem_stride)}, or 0 to choose one."
            )
        return model

    def param_groups(self) -> list:
        """SimMIM's `build_pretrain_optimizer` split: no weight decay on norms, biases, the mask token and what the
        backbone names in `no_weight_decay()` / `no_weight_decay_keywords()` (a ViT's cls_token, its pos_embed where
        `positions=learned` trains it, Swin's relative position tables)."""
        backbone = self.model.backbone
        exempt = {f"backbone.{name}" for name in getattr(backbone, "no_weight_decay", set)()}
        exempt |= {f"backbone.*{word}*" for word in getattr(backbone, "no_weight_decay_keywords", set)()}
        return param_groups_weight_decay(
            self.model, self.cfg.weight_decay, no_weight_decay_list={"mask_token", *exempt}
        )

    def corruption(self) -> str:
        return f"SimMIM masking ({self.args['mask_ratio']:.0%} of {self.patch}-px patches; --task unused)"

    def corrupt(self, images: torch.Tensor, generator: torch.Generator) -> MaskedImages:
        if images.dtype == torch.uint8:
            images = images.float() / 255
        mask = random_mask(
            images.shape[0],
            images.shape[-1],
            self.model.stem_stride,
            self.patch,
            self.args["mask_ratio"],
            generator,
            images.device,
        )
        return MaskedImages(images, mask)

    def loss(self, sample: MaskedImages) -> torch.Tensor:
        return self.model(sample.images, sample.mask)[1]

    def held_out_error(self, batches) -> HeldOut:
        return masked_pixel_error(self, batches)

    def figure(self, images: torch.Tensor) -> Figure:
        # the same seeded masks as the columns: the title's numbers are the figure's own images
        error = masked_pixel_error(self, [images])
        generator = torch.Generator(device=images.device).manual_seed(self.cfg.seed)
        with eval_mode(self.model), torch.no_grad():
            sample = self.corrupt(images, generator)
            prediction = self.model.unnormalise(self.model(sample.images, sample.mask)[0])
        pixels = self.pixel_mask(sample.mask)
        columns = {
            "masked": images * (1 - pixels),
            "reconstruction": images * (1 - pixels) + prediction * pixels,
            "original": images,
        }
        return Figure(columns, with_figure_numbers(f"SimMIM on {self.cfg.backbone}", error))

    def probe_forward(self, images: torch.Tensor) -> None:
        self.model(images, torch.zeros(images.shape[0], self.model.grid, self.model.grid, device=images.device))

    def pixel_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """[B, h, w] stem cells -> [B, 1, H, W] pixels."""
        stride = self.model.stem_stride
        return mask.repeat_interleave(stride, 1).repeat_interleave(stride, 2).unsqueeze(1)


def masked_pixel_error(method: SimMIMMethod, batches) -> HeldOut:
    """MSE in [0, 1] pixels on the masked pixels only (what SimMIM learns to fill): of the reconstruction, and of
    the visible-mean fill (each image's visible pixels' mean colour), SimMIM's baseline and trivial restorer."""
    model, device = method.model, method.device
    generator = torch.Generator(device=device).manual_seed(method.cfg.seed)
    fill = restored = 0.0
    count = 0
    with eval_mode(model), torch.no_grad():
        for images in batches:
            sample = method.corrupt(images.to(device), generator)
            images = sample.images
            pixels = method.pixel_mask(sample.mask)
            visible = 1 - pixels
            mean = (images * visible).sum((2, 3), keepdim=True) / visible.sum((2, 3), keepdim=True).clamp_min(1)
            prediction = model.unnormalise(model(images, sample.mask)[0])
            fill += masked_mse(mean.expand_as(images), images, pixels).sum().item()
            restored += masked_mse(prediction, images, pixels).sum().item()
            count += images.shape[0]
    if count == 0:
        raise ValueError("no held-out images to evaluate")
    return fill_report(count, fill / count, restored / count, "visible-mean fill", "masked-pixel MSE", "simmim")


def masked_mse(guess: torch.Tensor, images: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
    """Per image: the MSE over its masked pixels and channels."""
    return (F.mse_loss(guess, images, reduction="none") * pixels).sum((1, 2, 3)) / (pixels.sum((1, 2, 3)) * 3)
