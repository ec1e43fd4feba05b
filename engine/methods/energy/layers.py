"""An energy that reads several of the backbone's blocks (`--method-arg read_layers=K`, not the paper's): the
paper's head on the last block's pooled features plus one bias-free linear head per earlier block read, on
that block's output averaged over positions and layer-normalised (no weights: the blocks' scales differ). The
restoration gradient then reaches the lower blocks directly, not only through the ones above them."""

import torch
from torch import Tensor, nn

from pretexts.engine.modules.features import block_count, pooled_block
from pretexts.errors import ParameterError


def energy_head(dim: int, init_std: float | None = None) -> nn.Linear:
    """A one-output linear head without bias (paper, Section 3.2); `init_std` draws N(0, std^2), None keeps
    PyTorch's Linear init."""
    head = nn.Linear(dim, 1, bias=False)
    if init_std is not None:
        nn.init.normal_(head.weight, std=init_std)
    return head


def read_indices(backbone: nn.Module, count: int, name: str) -> tuple[int, ...]:
    """The earlier blocks read beside the last, spread evenly over the backbone's depth: `count` - 1 indices into
    timm's `feature_info` (vit_tiny's 12 blocks with count 3: 3 and 7, i.e. after blocks 4 and 8)."""
    blocks = block_count(backbone)
    if not blocks:
        raise ParameterError(
            f"--method-arg read_layers reads the blocks through timm's forward_intermediates, which backbone "
            f"'{name}' does not have; use read_layers=1."
        )
    if count > blocks:
        raise ParameterError(
            f"--method-arg read_layers={count} is more than backbone '{name}' has blocks to read ({blocks}); give "
            f"1 to {blocks}."
        )
    return tuple(j * blocks // count - 1 for j in range(1, count))


class LayerReads(nn.Module):
    """The heads on earlier blocks; `forward(backbone, x)` is (the last block's pooled features, the earlier
    blocks' summed energies [B])."""

    def __init__(self, backbone: nn.Module, count: int, name: str, head_init_std: float | None = None):
        super().__init__()
        self.indices = read_indices(backbone, count, name)
        dims = [backbone.feature_info[i]["num_chs"] for i in self.indices]
        self.heads = nn.ModuleList(energy_head(dim, head_init_std) for dim in dims)

    def forward(self, backbone: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
        last, earlier = backbone.forward_intermediates(x, indices=list(self.indices), output_fmt="NCHW")
        pooled = backbone.forward_head(last, pre_logits=True)
        energies = [head(pooled_block(block)).squeeze(-1) for head, block in zip(self.heads, earlier, strict=True)]
        return pooled, torch.stack(energies).sum(0)
