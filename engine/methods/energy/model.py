"""The energy model: E(x) = h(psi(normalise(x))), a backbone, a bias-free linear head and a step size."""

import math
from contextlib import nullcontext

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from pretexts.backbones.factory import create_backbone, pooled_width
from pretexts.backbones.normalisation import normalisation
from pretexts.backbones.vit_tokens import (
    AUTO_POSITIONS,
    LEARNED_POSITIONS,
    SINCOS_POSITIONS,
    fix_sincos_positions,
    resolved_positions,
)
from pretexts.engine.modules.second_order import make_twice_differentiable
from pretexts.errors import ParameterError


class EnergyModel(nn.Module):
    """Any backbone psi plus a one-output linear head h without bias (paper, Section 3.2).

    alpha, the restoration step size, is learnable and kept positive through its logarithm
    (the paper initialises it at 0.1 and "imposes a positive constraint", Appendix A.1).
    `head_init_std` None keeps PyTorch's default head init; a value draws N(0, std^2).
    `energy_scale` multiplies the energy; both scale the first restoration steps of a fresh model.
    `name`, the backbone's alias or timm name, is kept as `backbone_name` for messages.
    `positions` says whether a ViT's patch positions are timm's learned ones or the fixed sin-cos table
    (`create_energy_model` sets it).
    """

    positions = LEARNED_POSITIONS

    def __init__(
        self,
        backbone: nn.Module,
        mean=None,
        std=None,
        alpha: float = 0.1,
        head_init_std: float | None = None,
        energy_scale: float = 1.0,
        name: str | None = None,
    ):
        super().__init__()
        positive_number("alpha", alpha, "the restoration step size; the paper's is 0.1")
        positive_number("energy_scale", energy_scale, "1 leaves the energy as the head gives it")
        if head_init_std is not None:
            positive_number("head_init_std", head_init_std, "None keeps PyTorch's Linear init")
        own_mean, own_std = normalisation(backbone)
        mean, std = own_mean if mean is None else mean, own_std if std is None else std
        make_twice_differentiable(backbone)  # the restoration's double backward runs through every layer
        self.backbone = backbone
        self.head = energy_head(pooled_width(backbone), head_init_std)
        if name is not None:
            self.backbone_name = name
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)))
        self.energy_scale = energy_scale
        self.math_attention = True  # the one SDPA kernel with a double backward; finite differences lift it
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    @property
    def alpha(self) -> Tensor:
        """The positive, learnable restoration step size."""
        return self.log_alpha.exp()

    def normalize(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std

    def score(self, features: Tensor) -> Tensor:
        """Energies [B] from pooled features [B, D]."""
        return self.head(features).squeeze(-1) * self.energy_scale

    def energy(self, x: Tensor) -> Tensor:
        """Energies [B] of images [B,3,H,W] in [0,1] (uint8 is read as pixels / 255, as the tasks read it). Runs
        attention on the MATH SDPA backend, the one kernel with a double backward, unless `math_attention` is off."""
        if x.dtype == torch.uint8:
            x = x.float() / 255
        with sdpa_kernel(SDPBackend.MATH) if self.math_attention else nullcontext():
            return self.score(self.backbone(self.normalize(x)))

    def forward(self, x: Tensor) -> Tensor:
        return self.energy(x)


def create_energy_model(
    name: str,
    img_size: int | None = None,
    alpha: float = 0.1,
    head_init_std: float | None = None,
    energy_scale: float = 1.0,
    positions: str = AUTO_POSITIONS,
    **backbone_kwargs,
) -> EnergyModel:
    """`create_backbone(name, img_size, **backbone_kwargs)` wrapped as an energy model.

    E(x) = h(psi(normalise(x))): the backbone psi, a one-output linear head h without bias (paper, Section 3.2)
    and the learnable step size alpha. The backbone is built at random init (nothing is downloaded), with fused
    attention off, so the restoration's double backward runs.

    Args:
        name: A backbone alias (vit_tiny, vit_small, swin_t, convnext_t, resnet18, ...;
            `pretexts list --backbones`) or a timm model name.
        img_size: The image side the backbone is built for (ViTs fix it); None: the alias's or timm's default.
        alpha: The initial restoration step size, learnable and kept positive (Appendix A.1: initialised at 0.1,
            "a positive constraint").
        head_init_std: Draw the head's initial weights from N(0, std^2); None keeps PyTorch's Linear init.
        energy_scale: Multiplies the energy; with `head_init_std` it sets the size of a fresh model's first
            restoration steps.
        positions: A ViT's patch positions: "auto" (the default, as `pretexts train`'s: sincos where the backbone
            has a ViT's absolute positions, else learned), "learned" (timm's, from random) or "sincos" (the fixed
            2D sin-cos table, MAE's encoder's); `model.positions` says which it resolved to.
        **backbone_kwargs (Any): Passed on to timm (`depth=2`, `patch_size=8`, `drop_path_rate=0.1`, ...).

    Returns:
        The `EnergyModel`: `model.energy(images)` the energies, `model.alpha` the step size, `model.mean` and
        `model.std` its input normalisation `(1, 3, 1, 1)`, `model.backbone` what fine-tuning takes.

    Raises:
        UnknownNameError: No alias or timm model has the name (close names are suggested).
        ParameterError: The backbone cannot be built with these arguments.
        ParameterError: `positions="sincos"` on a backbone without a ViT's position embeddings.
        ParameterError: `alpha`, `energy_scale` or `head_init_std` is not a finite number > 0.

    Shape:
        - model.energy(images): images `(B, 3, H, W)` float in [0, 1] -> energies `(B,)`.

    Examples:
        >>> import torch
        >>> from pretexts.engine import create_energy_model
        >>> model = create_energy_model("vit_tiny", img_size=32, depth=2)  # a two-block ViT-Tiny
        >>> model.energy(torch.rand(4, 3, 32, 32)).shape
        torch.Size([4])
        >>> round(model.alpha.item(), 6), model.mean.shape
        (0.1, torch.Size([1, 3, 1, 1]))
        >>> model.positions  # auto on a ViT, as pretexts train: the fixed sin-cos table
        'sincos'
    """
    backbone = create_backbone(name, img_size=img_size, **backbone_kwargs)
    positions = resolved_positions(positions, backbone)
    if positions == SINCOS_POSITIONS:
        fix_sincos_positions(backbone, name, "positions=sincos")
    model = EnergyModel(
        backbone,
        alpha=alpha,
        head_init_std=head_init_std,
        energy_scale=energy_scale,
        name=name,
    )
    model.positions = positions
    return model


def positive_number(name: str, value, meaning: str) -> None:
    """A ParameterError unless `value` is a finite real number > 0."""
    try:
        number = float(value) if not isinstance(value, (bool, str)) else math.nan
    except (TypeError, ValueError):  # a tensor of several values, None, ...
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ParameterError(f"{name} must be a finite number > 0 ({meaning}), got {value!r}.")


def energy_head(dim: int, init_std: float | None = None) -> nn.Linear:
    """A one-output linear head without bias (paper, Section 3.2); `init_std` draws N(0, std^2), None keeps
    PyTorch's Linear init."""
    head = nn.Linear(dim, 1, bias=False)
    if init_std is not None:
        nn.init.normal_(head.weight, std=init_std)
    return head
