"""Weighted k-nearest-neighbour classification of frozen features (InstDisc; lightly's and solo-learn's kNN)."""

import math
from numbers import Integral, Real

import torch.nn.functional as F
from torch import Tensor

from pretexts.errors import ParameterError


def check_knn(k: int, temperature: float) -> None:
    """ParameterError for a neighbour count below 1 or a temperature that is not positive."""
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ParameterError(f"kNN k must be a whole number >= 1 (neighbours that vote), got {k!r}.")
    if not isinstance(temperature, Real) or math.isnan(temperature) or temperature <= 0:
        raise ParameterError(f"kNN temperature must be > 0 (votes weigh exp(cosine / T)), got {temperature!r}.")


def knn_predict(
    features: Tensor, bank: Tensor, bank_labels: Tensor, num_classes: int, k: int = 200, temperature: float = 0.07
) -> Tensor:
    """Class scores [B, C] of `features` [B, D] from their k nearest rows of `bank` [N, D] by cosine similarity.

    Each neighbour votes for its label with weight exp(similarity / temperature) (Wu et al. 2018;
    lightly's `knn_predict`, solo-learn's WeightedKNNClassifier), each row scaled so that its nearest neighbour
    weighs 1: the same ranking, without the overflow of exp(1 / T) in float32 once T < 0.012. k is capped at N.
    """
    check_knn(k, temperature)
    features, bank = F.normalize(features.float(), dim=1), F.normalize(bank.float(), dim=1)
    similarity = features @ bank.T
    nearest, neighbours = similarity.topk(min(k, bank.shape[0]), dim=1)  # sorted: column 0 is the largest
    weights = ((nearest - nearest[:, :1]) / temperature).exp()
    votes = F.one_hot(bank_labels[neighbours], num_classes).float()  # [B, k, C]
    return (votes * weights.unsqueeze(-1)).sum(1)


def knn_accuracy(
    train_features: Tensor,
    train_labels: Tensor,
    val_features: Tensor,
    val_labels: Tensor,
    num_classes: int,
    k: int,
    temperature: float = 0.07,
    chunk: int = 1024,
) -> float:
    """Top-1 accuracy in percent of kNN on `val` with `train` as the bank (scored in chunks to bound memory)."""
    check_knn(k, temperature)
    correct = 0
    for start in range(0, val_features.shape[0], chunk):
        scores = knn_predict(
            val_features[start : start + chunk], train_features, train_labels, num_classes, k, temperature
        )
        correct += (scores.argmax(1) == val_labels[start : start + chunk]).sum().item()
    return 100.0 * correct / max(val_features.shape[0], 1)
