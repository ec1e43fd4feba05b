"""Representation health: effective rank, top-component share, brightness correlation and kNN behave as their
definitions say on features whose answer is known."""

import torch

from pretexts.engine.measures.health import (
    brightness,
    correlation,
    knn_top1,
    label_free,
    rankme,
    standardise,
    top_component_share,
)


def test_rank_and_top_component_tell_a_collapse_from_a_spread():
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(256, 32, generator=g)
    collapsed = torch.randn(256, 1, generator=g) * torch.randn(1, 32, generator=g) + 0.01 * spread
    assert rankme(spread) > 25 and rankme(collapsed) < 3
    assert top_component_share(spread) < 0.1 and top_component_share(collapsed) > 0.95
    health = label_free(collapsed)
    assert set(health) == {"rankme", "top_pc_share"} and 0 <= health["top_pc_share"] <= 1


def test_brightness_correlation_finds_a_brightness_detector(real_images):
    energy_like = -3.0 * brightness(real_images) + 0.01 * torch.randn(len(real_images))
    assert correlation(energy_like, brightness(real_images)) < -0.95
    shuffled = brightness(real_images)[torch.randperm(len(real_images), generator=torch.Generator().manual_seed(0))]
    assert abs(correlation(shuffled, brightness(real_images))) < 0.7
    assert correlation(torch.ones(8), torch.arange(8.0)) == 0.0


def test_standardised_knn_sees_through_one_dominant_direction():
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(400) % 4
    signal = torch.nn.functional.one_hot(labels, 4).float() + 0.3 * torch.randn(400, 4, generator=g)
    loud = 10 * torch.randn(400, 3, generator=g)  # nuisance directions (brightness, ...) drowning the classes
    features = torch.cat([signal, loud], dim=1)
    scores = knn_top1(features[:300], labels[:300], features[300:], labels[300:], k=20)
    assert scores["knn_standardised"] > 90 and scores["knn_cosine"] < 60


def test_standardising_uses_the_banks_statistics_for_the_queries_too():
    """The val features are moved and scaled as the training bank is: their own mean and spread never leak in.
    A val set of one class sits on its class's side of the bank's mean; centred on itself, it would not."""
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(200) % 2
    bank = torch.stack([4.0 * labels - 2.0 + torch.randn(200, generator=g), torch.randn(200, generator=g)], 1)
    query = torch.stack([2.0 + 0.3 * torch.randn(50, generator=g), torch.randn(50, generator=g)], 1)  # class 1
    bank_std, query_std = standardise(bank, query)
    torch.testing.assert_close(query_std, (query - bank.mean(0)) / bank.std(0))
    torch.testing.assert_close(bank_std, (bank - bank.mean(0)) / bank.std(0))
    assert knn_top1(bank, labels, query, torch.ones(50, dtype=torch.long), k=20)["knn_standardised"] == 100.0
