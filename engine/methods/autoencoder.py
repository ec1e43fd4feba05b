"""The autoencoder baseline (`--method ae`, the paper's "AE + SR", "AE + denoising", "AE + sorting" rows, Table 2):
the same backbone, data and corruption as the energy method, but a light decoder reconstructs the target.
The whole method is this file: its model, loss, held-out error and figure."""
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from pretexts import backbones
from pretexts.backbones.vit_tokens import sincos_pos_embed, vit_geometry
from pretexts.base import Pretext
from pretexts.errors import ParameterError
from pretexts.params import Param

from pretexts.engine.evaluation.segmentation.heads import Features, UperNet, is_plain_vit
from pretexts.engine.methods import register_method
from pretexts.engine.methods.base import Method, add_or_none, trivial_sum, with_figure_numbers
from pretexts.engine.methods.energy.restore import restoration_loss
from pretexts.engine.training.eval_mode import eval_mode


# MAE's decoder is 8 blocks of width 512 for ViT-L; its ablation shows one narrow block still fine-tunes
# as well. A few narrow blocks keep the baseline light at CPU scale.
DECODER_DIM, DECODER_DEPTH, DECODER_HEADS = 128, 2, 4


@register_method("ae")
class AutoencoderMethod(Method):
    summary = "autoencoder baseline: the task's corruption, a light decoder reconstructs the target (any backbone)"

    method_params = {
        "decoder_dim": Param(DECODER_DIM, int, 8, 4096, help="decoder width (ViT token blocks, or the CNN's FPN)"),
        "decoder_depth": Param(DECODER_DEPTH, int, 1, 64, help="ViT token decoder blocks (MAE: 8 for ViT-L)"),
        "decoder_heads": Param(DECODER_HEADS, int, 1, 64, help="ViT token decoder heads; must divide decoder_dim"),
    }

    def build_model(self) -> nn.Module:
        cfg, args = self.cfg, self.args
        if args["decoder_dim"] % args["decoder_heads"]:
            raise ParameterError(f"method ae: decoder_dim {args['decoder_dim']} is not divisible by decoder_heads "
                                 f"{args['decoder_heads']}; choose heads that divide the width.")
        backbone = backbones.create_backbone(cfg.backbone, img_size=cfg.img_size)
        return AutoencoderModel(backbone, self.task, cfg.img_size, cfg.backbone, **args)

    def loss(self, sample) -> Tensor:
        prediction, target = self.model.reconstruct(sample)
        return restoration_loss([prediction], target, self.cfg.loss)

    def held_out_error(self, batches) -> dict:
        return reconstruction_error(self.model, self.task, batches, self.device, seed=self.cfg.seed)

    def figure_columns(self, images: Tensor) -> dict:
        # the same seeded corruption as the columns: the title's numbers are the figure's own images
        self.figure_error = reconstruction_error(self.model, self.task, [images], images.device, seed=self.cfg.seed)
        return reconstruction_columns(self.model, self.task, images, seed=self.cfg.seed)

    def figure_title(self) -> str:
        return with_figure_numbers(f"AE {self.cfg.task} on {self.cfg.backbone}", getattr(self, "figure_error", None))

    @staticmethod
    def fine_tuning_positions(pos: Tensor, backbone: nn.Module) -> Tensor:
        """Zeros: the sorting baseline's encoder has no position embedding (the paper adds them back, Section 4.1)."""
        return pos.zero_()


class LightDecoder(nn.Module):
    """Tokens [B, L, in_dim] -> predictions [B, L, out_dim]: embed, (+ fixed sin-cos positions), blocks, norm, linear."""

    def __init__(self, in_dim: int, out_dim: int, grid: tuple[int, int] | None, dim: int = DECODER_DIM,
                 depth: int = DECODER_DEPTH, heads: int = DECODER_HEADS):
        super().__init__()
        self.embed = nn.Linear(in_dim, dim)
        pos = sincos_pos_embed(grid, dim).unsqueeze(0) if grid is not None else None
        self.register_buffer("pos", pos, persistent=False)
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_ratio=4.0, qkv_bias=True) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, out_dim)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos.to(x.dtype)
        return self.out(self.norm(self.blocks(x)))


class PyramidDecoder(nn.Module):
    """A CNN's (or Swin's) 4 stages -> image: UperNet's PPM + FPN of width `dim` fused at the finest stage,
    which predicts each cell's stride x stride pixels (pixel shuffle).

    The last feature map alone is 1 x 1 at 32 px: a decoder reading only that stays 3-5x worse than its
    input; the pyramid gives it the spatial detail the stages before pooling hold.
    """

    def __init__(self, backbone: nn.Module, img_size: int, dim: int):
        super().__init__()
        self.features = Features(backbone, img_size)
        finest = self.features.widths[0]
        if img_size % finest:
            raise ParameterError(f"the finest feature map is {finest} px wide at {img_size} px; use an image size "
                                 f"that is a multiple of the backbone's total stride.")
        self.stride = img_size // finest
        self.head = UperNet(self.features.channels, 3 * self.stride ** 2, width=dim)

    def forward(self, images: Tensor) -> Tensor:
        return F.pixel_shuffle(self.head(self.features(images)), self.stride)


class AutoencoderModel(nn.Module):
    """Encoder = the backbone to pretrain; decoder = `LightDecoder` over tokens, or `PyramidDecoder` over stages.

    Pixel tasks: the encoder reads the corrupted image. A ViT gives one token per patch and the token
    decoder predicts each patch's pixels (MAE's per-patch pixel head). A CNN or Swin gives its 4 stages
    (timm `forward_intermediates`, the last feature map before pooling included) to a `PyramidDecoder`.
    Patch sorting (Section 4.1): the encoder ViT has no position embedding, sees the task's
    edge-masked image and, in training, only the kept tokens; the decoder, also without positions,
    predicts each patch's sin-cos position embedding, scored by MSE like the energy method's sorting.
    """

    def __init__(self, backbone: nn.Module, task: Pretext, img_size: int, name: str, decoder_dim: int = DECODER_DIM,
                 decoder_depth: int = DECODER_DEPTH, decoder_heads: int = DECODER_HEADS):
        super().__init__()
        self.backbone, self.backbone_name = backbone, name
        cfg = getattr(backbone, "pretrained_cfg", None) or {}
        self.register_buffer("mean", torch.tensor(cfg.get("mean", (0.485, 0.456, 0.406))).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(cfg.get("std", (0.229, 0.224, 0.225))).view(1, -1, 1, 1), persistent=False)
        self.sorting = task.state_kind == "positions"
        if task.state_kind not in ("pixels", "positions"):
            raise ParameterError(f"the autoencoder baseline reconstructs pixels, or positions for patch sorting; "
                                 f"task '{task.name}' restores something else.")
        dim = backbone.num_features
        if self.sorting:
            vit_geometry(backbone, name, "the autoencoder baseline of patch sorting")
            self.grid, self.patch = None, None
            self.decoder = LightDecoder(dim, backbone.embed_dim, None, decoder_dim, decoder_depth, decoder_heads)
            return
        if not is_plain_vit(backbone):  # CNNs and Swin: decode from their stages
            self.decoder = PyramidDecoder(backbone, img_size, decoder_dim)
            return
        self.grid = tuple(backbone.patch_embed.grid_size)
        self.patch = (img_size // self.grid[0], img_size // self.grid[1])
        self.decoder = LightDecoder(dim, 3 * self.patch[0] * self.patch[1], self.grid, decoder_dim, decoder_depth,
                                    decoder_heads)

    def normalize(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std

    def encode(self, images: Tensor) -> Tensor:
        """ViT patch tokens [B, L, D] of the corrupted images."""
        return self.backbone.forward_features(self.normalize(images))[:, self.backbone.num_prefix_tokens:]

    def encode_unpositioned(self, images: Tensor, keep: Tensor | None) -> Tensor:
        """ViT patch tokens without any position embedding (the sorting baseline's encoder), kept tokens only."""
        vit = self.backbone
        x = vit.patch_embed(self.normalize(images))
        x = x.flatten(1, 2) if x.ndim == 4 else x
        if keep is not None:
            x = x.gather(1, keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        prefix = [t.expand(x.shape[0], -1, -1) for t in (vit.cls_token, getattr(vit, "reg_token", None)) if t is not None]
        x = vit.norm_pre(vit.pos_drop(torch.cat(prefix + [x], dim=1)))
        return vit.norm(vit.blocks(x))[:, vit.num_prefix_tokens:]

    def unpatchify(self, patches: Tensor) -> Tensor:
        """[B, L, 3 * ph * pw] -> images [B, 3, H, W]."""
        (rows, cols), (ph, pw) = self.grid, self.patch
        x = patches.view(patches.shape[0], rows, cols, 3, ph, pw).permute(0, 3, 1, 4, 2, 5)
        return x.reshape(patches.shape[0], 3, rows * ph, cols * pw)

    def forward(self, images: Tensor, keep: Tensor | None = None) -> Tensor:
        """Pixel tasks: the reconstructed images. Patch sorting: each (kept) patch's predicted position embedding."""
        if self.sorting:
            return self.decoder(self.encode_unpositioned(images, keep))
        if isinstance(self.decoder, PyramidDecoder):
            return self.decoder(self.normalize(images))
        return self.unpatchify(self.decoder(self.encode(images)))

    def reconstruct(self, sample) -> tuple[Tensor, Tensor]:
        """(prediction, target) of a corrupted sample; in eval mode both cover every patch."""
        if not self.sorting:
            return self(sample.state), sample.target
        keep = sample.info.get("keep") if self.training else None
        target = sample.target
        if keep is not None:
            target = target.gather(1, keep.unsqueeze(-1).expand(-1, -1, target.shape[-1]))
        return self(sample.context, keep), target


def reconstruction_error(model: AutoencoderModel, task, batches, device, seed: int = 0) -> dict:
    """MSE to the target of the corrupted input, of the reconstruction and of the task's trivial restorer, in
    `restoration_error`'s format (the reconstruction is the one entry of restored_mse), on the same seeded
    corruptions."""
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
    error = {"corrupted_mse": corrupted / count, "restored_mse": [reconstructed / count], "images": count,
             "method": "ae"}
    if trivial is not None:
        error.update(trivial_mse=trivial / count, trivial_restorer=task.trivial_restorer)
    return error


def reconstruction_columns(model: AutoencoderModel, task, images: torch.Tensor, seed: int = 0) -> dict:
    """{'corrupted', 'reconstructed', 'original'} images for `restoration_figure`."""
    generator = torch.Generator(device=images.device).manual_seed(seed)
    with eval_mode(model), torch.no_grad():
        sample = task(images, generator)
        prediction, _ = model.reconstruct(sample)
    return {"corrupted": task.preview(sample, sample.state), "reconstructed": task.preview(sample, prediction),
            "original": images}
