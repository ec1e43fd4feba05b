"""The autoencoder baseline (`--method ae`): same backbone, data and corruption as the energy method,
but a light decoder reconstructs the target (the paper's "AE + SR", "AE + denoising", "AE + sorting" rows)."""
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

import backbones
from pretexts.errors import ParameterError
from pretexts.params import Param

from .autoencoder_model import DECODER_DEPTH, DECODER_DIM, DECODER_HEADS, AutoencoderModel
from .evaluate import eval_mode
from .figures import restoration_figure
from .methods import register_method
from .pretrain import Pretrainer
from .restore import restoration_loss


def reconstruction_error(model: AutoencoderModel, task, batches, device, seed: int = 0) -> dict:
    """MSE to the target of the corrupted input and of the reconstruction, in `restoration_error`'s format
    (the reconstruction is the one entry of restored_mse), on the same seeded corruptions."""
    generator = torch.Generator(device=device).manual_seed(seed)
    corrupted = reconstructed = 0.0
    count = 0
    with eval_mode(model), torch.no_grad():
        for images in batches:
            sample = task(images.to(device), generator)
            prediction, target = model.reconstruct(sample)
            n = images.shape[0]
            corrupted += F.mse_loss(sample.state.float(), sample.target.float()).item() * n
            reconstructed += F.mse_loss(prediction.float(), target.float()).item() * n
            count += n
    if count == 0:
        raise ValueError("no held-out images to evaluate")
    return {"corrupted_mse": corrupted / count, "restored_mse": [reconstructed / count], "images": count,
            "method": "ae"}


def reconstruction_columns(model: AutoencoderModel, task, images: torch.Tensor, seed: int = 0) -> dict:
    """{'corrupted', 'reconstructed', 'original'} images for `restoration_figure`."""
    generator = torch.Generator(device=images.device).manual_seed(seed)
    with eval_mode(model), torch.no_grad():
        sample = task(images, generator)
        prediction, _ = model.reconstruct(sample)
    return {"corrupted": task.preview(sample, sample.state), "reconstructed": task.preview(sample, prediction),
            "original": images}


@register_method("ae")
class AutoencoderTrainer(Pretrainer):
    """`Pretrainer` with the autoencoder in place of the energy model; loop, data and outputs are shared."""

    summary = "autoencoder baseline: the task's corruption, a light decoder reconstructs the target (any backbone)"

    method_params = {
        "decoder_dim": Param(DECODER_DIM, int, 8, 4096, help="decoder width (ViT token blocks, or the CNN's FPN)"),
        "decoder_depth": Param(DECODER_DEPTH, int, 1, 64, help="ViT token decoder blocks (MAE: 8 for ViT-L)"),
        "decoder_heads": Param(DECODER_HEADS, int, 1, 64, help="ViT token decoder heads; must divide decoder_dim"),
    }

    @staticmethod
    def fine_tuning_positions(pos: torch.Tensor, backbone: torch.nn.Module) -> torch.Tensor:
        """Zeros: the sorting baseline's encoder has no position embedding (the paper adds them back, Section 4.1)."""
        return pos.zero_()

    def build_model(self) -> torch.nn.Module:
        cfg, args = self.cfg, self.method_args
        if args["decoder_dim"] % args["decoder_heads"]:
            raise ParameterError(f"method ae: decoder_dim {args['decoder_dim']} is not divisible by decoder_heads "
                                 f"{args['decoder_heads']}; choose heads that divide the width.")
        backbone = backbones.create_backbone(cfg.backbone, img_size=cfg.img_size)
        return AutoencoderModel(backbone, self.task, cfg.img_size, cfg.backbone, **args)

    def compute_loss(self, sample) -> torch.Tensor:
        autocast = torch.autocast(self.device.type, self.dtype) if self.dtype else nullcontext()
        with autocast:
            prediction, target = self.model.reconstruct(sample)
        return restoration_loss([prediction], target, self.cfg.loss)

    def held_out_error(self) -> dict:
        return reconstruction_error(self.model, self.task, self.val_batches(self.cfg.eval_images), self.device,
                                    seed=self.cfg.seed)

    def figure(self, path: Path) -> None:
        images = self.figure_batch()
        columns = reconstruction_columns(self.model, self.task, images, seed=self.cfg.seed)
        restoration_figure(columns, path, f"AE {self.cfg.task} on {self.cfg.backbone}, epoch {self.epoch}")

