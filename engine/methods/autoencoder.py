"""The autoencoder baseline (`--method ae`, the paper's "AE + SR", "AE + denoising", "AE + sorting" rows, Table 2):
the same backbone, data and corruption as the energy method, but a light decoder reconstructs the target.
The method is this file: its model, loss, held-out error and figure; its decoders are shared blocks
(`engine.modules.decoders`)."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pretexts import backbones
from pretexts.backbones.normalisation import normalisation
from pretexts.backbones.patches import unpatchify
from pretexts.backbones.vit_tokens import patch_tokens, vit_geometry, with_prefix
from pretexts.base import Pretext
from pretexts.engine.methods import register_method
from pretexts.engine.methods.base import Method, add_or_none, trivial_sum
from pretexts.engine.methods.energy.report import restoration_loss_name
from pretexts.engine.methods.energy.restore import LOSSES, restoration_loss
from pretexts.engine.methods.mae_model import mae_decoder
from pretexts.engine.methods.positions import POSITIONS_PARAM, StartsPositions
from pretexts.engine.methods.report import Figure, HeldOut, with_figure_numbers
from pretexts.engine.modules.decoders import LightDecoder, PyramidDecoder
from pretexts.engine.modules.eval_mode import eval_mode
from pretexts.engine.modules.features import is_plain_vit
from pretexts.errors import ParameterError
from pretexts.params import Param

# A ViT's token decoder is MAE's from ViT-B's width up (`mae_decoder`: 8 x 512, MAE's default for ViT-B, -L and -H),
# as the paper's AE baselines follow MAE. Below, a few narrow blocks keep the baseline light at CPU scale (MAE's
# ablation: one narrow block still fine-tunes as well). The CNN's pyramid decoder is 128 wide at every size.
SMALL_DECODER = {"decoder_dim": 128, "decoder_depth": 2, "decoder_heads": 4}


@register_method("ae")
class AutoencoderMethod(StartsPositions, Method):
    """The autoencoder baseline, `--method ae` (the paper's "AE + SR", "AE + denoising" and "AE + sorting" rows,
    Table 2): the same backbone, data and task corruption as the energy method, but instead of restoring by
    gradient steps on an energy, a light decoder reconstructs the target in one pass.

    A ViT's patch tokens go through transformer blocks that predict each patch's pixels (MAE's pixel head; MAE's
    decoder from ViT-B's width up, a few narrow blocks below); a CNN's or Swin's four stages go through a
    `PyramidDecoder` (UperNet's PPM + FPN). For patch sorting the encoder sees the edge-masked image without
    positions and the decoder predicts each patch's sin-cos position.
    Options (`--method-arg`): `decoder_dim`, `decoder_depth`, `decoder_heads` (unset: MAE's 512, 8 and 16 for a ViT
    as wide as ViT-B or wider, else 128, 2 and 4; a CNN's pyramid is 128 wide), `loss` ("mse" or "smooth_l1"),
    and a ViT's `positions` (auto: the fixed sin-cos table, as the energy method and MAE start from).
    """

    summary = "autoencoder baseline: the task's corruption, a light decoder reconstructs the target (any backbone)"

    method_params = {
        "decoder_dim": Param(
            None,
            int,
            8,
            4096,
            help="decoder width (ViT token blocks, or the CNN's FPN); unset: 512 for a ViT from ViT-B up, else 128",
        ),
        "decoder_depth": Param(None, int, 1, 64, help="ViT token decoder blocks; unset: 8 from ViT-B up (MAE), else 2"),
        "decoder_heads": Param(
            None, int, 1, 64, help="ViT token decoder heads, dividing the width; unset: 16 from ViT-B up, else 4"
        ),
        "loss": Param("mse", str, choices=LOSSES, help='"mse" or "smooth_l1", as the energy method\'s'),
        "positions": POSITIONS_PARAM,
    }
    figure_name = "reconstruction"

    @property
    def loss_name(self) -> str:
        """'reconstruction error (MSE, pixels in [0, 1])', or of position embeddings for patch sorting."""
        kind = getattr(self.task, "state_kind", "pixels")
        return restoration_loss_name(self.args["loss"], state_kind=kind, what="reconstruction")

    def build_model(self) -> nn.Module:
        cfg, args = self.cfg, self.args
        backbone = backbones.create_backbone(cfg.backbone, img_size=cfg.img_size, global_pool=cfg.global_pool)
        self.start_positions(backbone)
        decoder = {k: v for k, v in args.items() if k.startswith("decoder_")}
        return AutoencoderModel(backbone, self.task, cfg.img_size, cfg.backbone, **decoder)

    def loss(self, sample) -> Tensor:
        prediction, target = self.model.reconstruct(sample)
        return restoration_loss([prediction], target, self.args["loss"])

    def held_out_error(self, batches) -> HeldOut:
        return reconstruction_error(self.model, self.task, batches, self.device, seed=self.cfg.seed)

    def figure(self, images: Tensor) -> Figure:
        # the same seeded corruption as the columns: the title's numbers are the figure's own images
        error = reconstruction_error(self.model, self.task, [images], images.device, seed=self.cfg.seed)
        columns = reconstruction_columns(self.model, self.task, images, seed=self.cfg.seed)
        return Figure(columns, with_figure_numbers(f"AE {self.cfg.task} on {self.cfg.backbone}", error))

    @staticmethod
    def fine_tuning_positions(pos: Tensor, backbone: nn.Module) -> Tensor:
        """Zeros: the sorting baseline's encoder has no position embedding (the paper adds them back, Section 4.1)."""
        return pos.zero_()


class AutoencoderModel(nn.Module):
    """Encoder = the backbone to pretrain; decoder = `LightDecoder` over tokens, or `PyramidDecoder` over stages.

    Pixel tasks: the encoder reads the corrupted image. A ViT gives one token per patch and the token
    decoder predicts each patch's pixels (MAE's per-patch pixel head). A CNN or Swin gives its 4 stages
    (timm `forward_intermediates`, the last feature map before pooling included) to a `PyramidDecoder`.
    Patch sorting (Section 4.1): the encoder ViT has no position embedding, sees the task's
    edge-masked image and, in training, only the kept tokens; the decoder, also without positions,
    predicts each patch's sin-cos position embedding, scored by MSE like the energy method's sorting.
    """

    def __init__(
        self,
        backbone: nn.Module,
        task: Pretext,
        img_size: int,
        name: str,
        decoder_dim: int | None = None,
        decoder_depth: int | None = None,
        decoder_heads: int | None = None,
    ):
        super().__init__()
        self.backbone, self.backbone_name = backbone, name
        mean, std = normalisation(backbone)
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)
        self.sorting = task.state_kind == "positions"
        if task.state_kind not in ("pixels", "positions"):
            raise ParameterError(
                f"the autoencoder baseline reconstructs pixels, or positions for patch sorting; "
                f"task '{task.name}' restores something else."
            )
        dim = backbone.num_features
        sizes = (decoder_dim, decoder_depth, decoder_heads)
        if self.sorting:
            vit_geometry(backbone, name, "the autoencoder baseline of patch sorting")
            self.grid, self.patch = None, None
            self.decoder = LightDecoder(dim, backbone.embed_dim, None, *token_decoder_sizes(dim, *sizes))
            return
        if not is_plain_vit(backbone):  # CNNs and Swin: decode from their stages
            self.decoder = PyramidDecoder(backbone, img_size, decoder_dim or SMALL_DECODER["decoder_dim"])
            return
        self.grid = tuple(backbone.patch_embed.grid_size)
        self.patch = (img_size // self.grid[0], img_size // self.grid[1])
        out = 3 * self.patch[0] * self.patch[1]
        self.decoder = LightDecoder(dim, out, self.grid, *token_decoder_sizes(dim, *sizes))

    def normalize(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std

    def encode(self, images: Tensor) -> Tensor:
        """ViT patch tokens [B, L, D] of the corrupted images."""
        return patch_tokens(self.backbone, self.backbone.forward_features(self.normalize(images)))

    def encode_unpositioned(self, images: Tensor, keep: Tensor | None) -> Tensor:
        """ViT patch tokens without any position embedding (the sorting baseline's encoder), kept tokens only."""
        vit = self.backbone
        x = vit.patch_embed(self.normalize(images))
        x = x.flatten(1, 2) if x.ndim == 4 else x
        if keep is not None:
            x = x.gather(1, keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        x = vit.norm_pre(vit.pos_drop(with_prefix(vit, x, positioned=False)))
        return patch_tokens(vit, vit.norm(vit.blocks(x)))

    def forward(self, images: Tensor, keep: Tensor | None = None) -> Tensor:
        """Pixel tasks: the reconstructed images. Patch sorting: each (kept) patch's predicted position embedding."""
        if self.sorting:
            return self.decoder(self.encode_unpositioned(images, keep))
        if isinstance(self.decoder, PyramidDecoder):
            return self.decoder(self.normalize(images))
        return unpatchify(self.decoder(self.encode(images)), self.patch, self.grid)

    def reconstruct(self, sample) -> tuple[Tensor, Tensor]:
        """(prediction, target) of a corrupted sample; in eval mode both cover every patch."""
        if not self.sorting:
            return self(sample.state), sample.target
        keep = sample.info.get("keep") if self.training else None
        target = sample.target
        if keep is not None:
            target = target.gather(1, keep.unsqueeze(-1).expand(-1, -1, target.shape[-1]))
        return self(sample.context, keep), target


def token_decoder_sizes(width: int, dim: int | None, depth: int | None, heads: int | None) -> tuple[int, int, int]:
    """A ViT token decoder's width, depth and heads for an encoder `width` wide: each given, else MAE's decoder from
    ViT-B's width up (`mae_decoder`), else `SMALL_DECODER`. Heads that do not divide the width are refused."""
    auto = mae_decoder(width) or SMALL_DECODER
    dim, depth, heads = dim or auto["decoder_dim"], depth or auto["decoder_depth"], heads or auto["decoder_heads"]
    if dim % heads:
        raise ParameterError(
            f"method ae: decoder_dim {dim} is not divisible by decoder_heads {heads}; choose heads that divide the "
            f"width."
        )
    return dim, depth, heads


def reconstruction_error(model: AutoencoderModel, task, batches, device, seed: int = 0) -> HeldOut:
    """MSE to the target of the corrupted input, of the reconstruction (the one output, 'reconstructed') and of
    the task's trivial restorer, on the same seeded corruptions."""
    generator = torch.Generator(device=device).manual_seed(seed)
    corrupted = reconstructed = 0.0
    trivial = 0.0
    count = 0
    with eval_mode(model), torch.no_grad():
        for images in batches:
            sample = task(images.to(device), generator)
            prediction, target = model.reconstruct(sample)
            n = images.shape[0]
            corrupted += F.mse_loss(sample.state.float(), sample.target.float()).item() * n
            reconstructed += F.mse_loss(prediction.float(), target.float()).item() * n
            trivial = add_or_none(trivial, trivial_sum(task, sample))
            count += n
    if count == 0:
        raise ValueError("no held-out images to evaluate")
    return HeldOut(
        count,
        corrupted / count,
        [reconstructed / count],
        ("reconstructed",),
        result="reconstructed",
        measure="reconstruction MSE",
        method="ae",
        trivial_mse=None if trivial is None else trivial / count,
        trivial_restorer=None if trivial is None else task.trivial_restorer,
    )


def reconstruction_columns(model: AutoencoderModel, task, images: torch.Tensor, seed: int = 0) -> dict:
    """{'corrupted', 'reconstructed', 'original'} images for the epoch figure (`restoration_figure`)."""
    generator = torch.Generator(device=images.device).manual_seed(seed)
    with eval_mode(model), torch.no_grad():
        sample = task(images, generator)
        prediction, _ = model.reconstruct(sample)
    return {
        "corrupted": task.preview(sample, sample.state),
        "reconstructed": task.preview(sample, prediction),
        "original": images,
    }
