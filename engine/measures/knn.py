"""Weighted k-nearest-neighbour classification of frozen features (InstDisc; lightly's and solo-learn's kNN)."""

import torch.nn.functional as F
from torch import Tensor


def knn_predict(
    features: Tensor, bank: Tensor, bank_labels: Tensor, num_classes: int, k: int = 200, temperature: float = 0.07
) -> Tensor:
    """Class scores [B, C] of `features` [B, D] from their k nearest rows of `bank` [N, D] by cosine similarity.

    Each neighbour votes for its label with weight exp(similarity / temperature) (Wu et al. 2018;
    lightly's `knn_predict`, solo-learn's WeightedKNNClassifier). k is capped at N.
    """
    features, bank = F.normalize(features.float(), dim=1), F.normalize(bank.float(), dim=1)
    similarity = features @ bank.T
    weights, neighbours = similarity.topk(min(k, bank.shape[0]), dim=1)
    weights = (weights / temperature).exp()
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
    correct = 0
    for start in range(0, val_features.shape[0], chunk):
        scores = knn_predict(
            val_features[start : start + chunk], train_features, train_labels, num_classes, k, temperature
        )
        correct += (scores.argmax(1) == val_labels[start : start + chunk]).sum().item()
    return 100.0 * correct / max(val_features.shape[0], 1)
