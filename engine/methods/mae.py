"""The MAE baseline (`--method mae`, He et al. 2022): the same ViT, data, loop and outputs as the energy
method; MAE's own random patch masking replaces the task's corruption (`--task` is not used)."""

from dataclasses import dataclass

import torch

from pretexts import backbones
from pretexts.backbones.patches import patchify, unpatchify
from pretexts.engine.methods import register_method
from pretexts.engine.methods.base import Method, compile_forward
from pretexts.engine.methods.mae_model import MAX_HEADS, MAEModel
from pretexts.engine.methods.report import Figure, HeldOut, fill_report, with_figure_numbers
from pretexts.engine.modules.eval_mode import eval_mode
from pretexts.params import Param


@dataclass
class MaskingSample:
    """The clean images and the noise MAE's mask is the argsort of, drawn for the whole batch from the step's
    seeded generator (so `--accum-iter`'s micro-batches mask as the whole batch would)."""

    images: torch.Tensor
    noise: torch.Tensor


@register_method("mae")
class MAEMethod(Method):
    """MAE, `--method mae` (He et al. 2022, facebookresearch/mae's models_mae.py), on a ViT backbone: a share of
    patches is masked at random, the encoder sees only the visible ones, and a light decoder (transformer blocks,
    fixed sin-cos positions) predicts the masked patches' pixels, scored by MSE on those patches only.

    It draws its own masks, so `--task` is not used. Options (`--method-arg`): `mask_ratio` (0.75),
    `decoder_dim`, `decoder_depth` and `decoder_heads` (0: scaled to the encoder, MAE's 8 blocks of 512 from
    ViT-B up), `norm_pix_loss` (targets normalised per patch; on).
    """

    summary = "MAE (He et al. 2022): random patch masking, visible-only encoder, light decoder (ViT only)"
    method_params = {
        "mask_ratio": Param(0.75, float, 0.01, 0.99, help="share of patches masked (MAE: 0.75)"),
        "decoder_dim": Param(
            0, int, 0, 4096, help="decoder width; 0: 512 for ViT-B and wider (MAE), else half the encoder's, >= 64"
        ),
        "decoder_depth": Param(0, int, 0, 64, help="decoder blocks; 0: 8 for ViT-B and larger (MAE), else 2"),
        "decoder_heads": Param(0, int, 0, MAX_HEADS, help="decoder heads, dividing the width; 0: width / 32 or below"),
        "norm_pix_loss": Param(True, bool, help="targets normalised per patch (MAE's recipe)"),
    }
    figure_name = "reconstruction"
    uses_task = False

    @property
    def loss_name(self) -> str:
        """The held-out report's measure: MAE's loss is that MSE, on the masked patches."""
        return masked_patch_measure(self.args["norm_pix_loss"])

    def build_model(self) -> torch.nn.Module:
        cfg, args = self.cfg, self.args
        sizes = {k: args[k] or None for k in ("decoder_dim", "decoder_depth", "decoder_heads")}
        return MAEModel(
            backbones.create_backbone(cfg.backbone, img_size=cfg.img_size, global_pool=cfg.global_pool),
            cfg.backbone,
            mask_ratio=args["mask_ratio"],
            norm_pix_loss=args["norm_pix_loss"],
            **sizes,
        )

    def compile_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """--compile: the encoder (visible tokens through the backbone's blocks, not its forward_features) and the
        decoder; the masking, seeded by the step's generator, stays eager."""
        compile_forward(model, self.compile_backend, self.cfg.backbone, entries=("encode", "decode"))
        return model

    def corruption(self) -> str:
        return f"MAE masking ({self.args['mask_ratio']:.0%} of patches; --task unused)"

    def corrupt(self, images: torch.Tensor, generator: torch.Generator) -> MaskingSample:
        length = self.model.grid[0] * self.model.grid[1]
        return MaskingSample(images, torch.rand(len(images), length, generator=generator, device=images.device))

    def loss(self, sample: MaskingSample) -> torch.Tensor:
        loss, _, _ = self.model(sample.images, noise=sample.noise)
        return loss

    def held_out_error(self, batches) -> HeldOut:
        return masked_patch_error(self.model, batches, self.device, self.cfg.seed)

    def figure(self, images: torch.Tensor) -> Figure:
        # the same seeded masks as the columns: the title's numbers are the figure's own images
        error = masked_patch_error(self.model, [images], images.device, self.cfg.seed)
        columns = mae_columns(self.model, images, self.cfg.seed)
        return Figure(columns, with_figure_numbers(f"MAE on {self.cfg.backbone}", error))

    def probe_forward(self, images: torch.Tensor) -> None:
        self.model(images, torch.Generator(device=images.device).manual_seed(0))


def masked_patch_error(model: MAEModel, batches, device, seed: int = 0) -> HeldOut:
    """On the masked patches, in the loss's target space (per-patch normalised pixels under norm_pix_loss):
    the MSE of the reconstruction against that of the best fill without the encoder, the baseline
    ('corrupted_mse' in the record): each patch's own mean under norm_pix_loss (the patch-mean fill, i.e. 0), else
    the visible pixels' mean (the visible-mean fill). That fill is this method's trivial restorer, so
    'trivial_mse' repeats it, named, as the other methods report theirs."""
    generator = torch.Generator(device=device).manual_seed(seed)
    blank = restored = 0.0
    count = 0
    with eval_mode(model), torch.no_grad():
        for images in batches:
            images = images.to(device)
            loss, _, mask = model(images, generator)
            target = model.target(images)
            if model.norm_pix_loss:
                guess = torch.zeros_like(target)
            else:
                visible = (1 - mask).unsqueeze(-1)
                guess = (
                    (target * visible).sum((1, 2), keepdim=True) / (visible.sum(1, keepdim=True) * target.shape[-1])
                ).expand_as(target)
            blank += model.masked_loss(guess, images, mask).item() * images.shape[0]
            restored += loss.item() * images.shape[0]
            count += images.shape[0]
    if count == 0:
        raise ValueError("no held-out images to evaluate")
    fill = "patch-mean fill" if model.norm_pix_loss else "visible-mean fill"
    return fill_report(count, blank / count, restored / count, fill, masked_patch_measure(model.norm_pix_loss), "mae")


def masked_patch_measure(norm_pix_loss: bool) -> str:
    """MAE's loss and held-out error in words, in the target's space."""
    return f"masked-patch MSE ({'per-patch normalised pixels' if norm_pix_loss else 'normalised pixels'})"


def mae_columns(model: MAEModel, images: torch.Tensor, seed: int = 0) -> dict:
    """{'masked', 'reconstruction', 'original'}: MAE's visualisation, the visible patches pasted back and the
    predicted ones shown in pixels (un-normalised with each patch's true mean and std, as MAE's demo does)."""
    generator = torch.Generator(device=images.device).manual_seed(seed)
    with eval_mode(model), torch.no_grad():
        _, pred, mask = model(images, generator)
    if model.norm_pix_loss:
        patches = patchify(model.normalised(images), model.patch)
        pred = pred * (patches.var(-1, keepdim=True) + 1e-6) ** 0.5 + patches.mean(-1, keepdim=True)
    pixel_mask = unpatchify(mask.unsqueeze(-1).expand(-1, -1, pred.shape[-1]), model.patch, model.grid)
    reconstruction = unpatchify(pred, model.patch, model.grid) * model.std + model.mean  # to pixels in [0, 1]
    return {
        "masked": images * (1 - pixel_mask),
        "reconstruction": images * (1 - pixel_mask) + reconstruction * pixel_mask,
        "original": images,
    }
