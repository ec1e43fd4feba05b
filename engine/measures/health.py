"""How healthy a representation is while it forms, from pooled features of clean images.

Label-free: the effective rank (RankMe, Garrido et al. 2023) and the share of variance in the top principal
component (a collapse to one direction, such as "how dark is the image", shows as a share near 1), and the
correlation of a scalar (the energy) with the images' mean brightness. With labels: kNN top-1 on cosine and
on standardised features (standardising undoes one dominant dimension, so the gap between the two says how much
a single direction drowns the rest).
"""

import torch
from torch import Tensor

from pretexts.engine.measures.knn import knn_accuracy


def rankme(features: Tensor, eps: float = 1e-7) -> float:
    """exp(entropy of the normalised singular values) of [N, D] features: 1 (collapsed) up to min(N, D)."""
    s = torch.linalg.svdvals(features.double())
    p = s / s.sum().clamp_min(eps) + eps
    return float(torch.exp(-(p * p.log()).sum()))


def top_component_share(features: Tensor) -> float:
    """The share of the centred features' variance along their first principal component, in [0, 1]."""
    centred = features.double() - features.double().mean(0)
    s2 = torch.linalg.svdvals(centred) ** 2
    return float(s2[0] / s2.sum()) if s2.sum() > 0 else 1.0


def correlation(a: Tensor, b: Tensor) -> float:
    """Pearson correlation of two [N] vectors (0 when either is constant)."""
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    denominator = a.norm() * b.norm()
    return float((a * b).sum() / denominator) if denominator > 0 else 0.0


def brightness(images: Tensor) -> Tensor:
    """Mean pixel value of each image [B,3,H,W] in [0, 1]."""
    return images.float().mean(dim=(1, 2, 3))


def standardise(bank: Tensor, *others: Tensor) -> list[Tensor]:
    """Each dimension to zero mean and unit variance, with the bank's statistics."""
    mean, std = bank.mean(0), bank.std(0).clamp_min(1e-6)
    return [(t - mean) / std for t in (bank, *others)]


def knn_top1(bank: Tensor, bank_labels: Tensor, query: Tensor, query_labels: Tensor, k: int = 20) -> dict:
    """kNN top-1 (%) of `query` against `bank`, on cosine and on standardised features."""
    classes = int(max(bank_labels.max(), query_labels.max())) + 1
    bank_std, query_std = standardise(bank.float(), query.float())
    return {
        "knn_cosine": knn_accuracy(bank, bank_labels, query, query_labels, classes, k),
        "knn_standardised": knn_accuracy(bank_std, bank_labels, query_std, query_labels, classes, k),
    }


def label_free(features: Tensor) -> dict:
    return {"rankme": rankme(features), "top_pc_share": top_component_share(features)}
