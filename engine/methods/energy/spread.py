"""An optional term against the energy's features collapsing onto few directions (issue 39): on a ViT the
restoration loss alone leaves 72-84 % of the pooled features' variance on one principal component."""

from torch import Tensor


def concentration(features: Tensor) -> Tensor:
    """How much of the centred features' variance lies on few directions, differentiably: sum(l^2) / sum(l)^2 over
    the covariance's eigenvalues l, 1 when it all lies on one direction, 1 / min(B - 1, D) when it is spread evenly
    (the inverse of the participation ratio). Computed on the B x B Gram matrix: no eigendecomposition.

    Shape:
        - features: `(B, D)`, B >= 2.
        - Returns: `()`, float32.
    """
    if features.ndim != 2 or features.shape[0] < 2:
        raise ValueError(f"concentration needs features [B, D] with B >= 2, got {tuple(features.shape)}")
    centred = features.float() - features.float().mean(0)
    gram = centred @ centred.T  # its nonzero eigenvalues are the covariance's, times B - 1
    return gram.square().sum() / gram.diagonal().sum().square().clamp_min(1e-12)
