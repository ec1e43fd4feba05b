"""The probe protocols as a user relies on them: the kNN temperature asked for is the one that votes (through
`knn_accuracy`, the knn probe and `pretexts probe --knn-temperature`), and the linear probe is MAE's, a BatchNorm
without affine before the linear layer, scored on val in eval mode (the training set's statistics)."""

import json

import pytest
import torch
from click.testing import CliRunner
from pretrained_checkpoints import single_thread  # noqa: F401 (a fixture)
from torch import nn

from pretexts.cli import main
from pretexts.engine import ProbeConfig
from pretexts.engine.evaluation import probe
from pretexts.engine.evaluation.probe import knn_probe, probe_head, train_head
from pretexts.engine.measures.knn import knn_accuracy

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

# one neighbour at cosine 1 with label 0, two at cosine 0.6 with label 1: at T = 0.07 the nearest outweighs the
# two (exp(1 / 0.07) > 2 exp(0.6 / 0.07)) and the query, of class 0, is right; at T = 10 the majority wins
BANK = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.6, -0.8]]), torch.tensor([0, 1, 1])
QUERY = torch.tensor([[1.0, 0.0]]), torch.tensor([0])


@pytest.mark.parametrize("temperature, top1", [(0.07, 100.0), (10.0, 0.0)])
def test_knn_accuracy_votes_at_the_temperature_asked_for(temperature, top1):
    assert knn_accuracy(*BANK, *QUERY, num_classes=2, k=3, temperature=temperature) == top1


@pytest.mark.parametrize("temperature, top1", [("0.07", 100.0), ("10", 0.0)])
def test_the_knn_probe_votes_at_its_knn_temperature(temperature, top1):
    cfg = ProbeConfig(
        checkpoint="unused.pt", probes=("knn",), probe_args={"knn_k": "3", "knn_temperature": temperature}
    )
    results, _ = knn_probe(BANK, QUERY, 2, cfg, **cfg.probe_params("knn"))
    assert results["k=3"] == top1 and results["temperature"] == float(temperature)


def test_pretexts_probe_knn_temperature_changes_the_reported_top1(tmp_path, monkeypatch):
    """The CLI end to end, its extracted features replaced by the bank and query above."""
    from cli_runs import tiny_image_folder

    def extracted(model, dataset, device, desc="features", **options):
        return BANK if desc.startswith("train") else QUERY

    monkeypatch.setattr(probe, "extract_features", extracted)
    data = tiny_image_folder(tmp_path / "d")  # 2 classes
    reported = {}
    for temperature in ("0.07", "10"):
        out = tmp_path / f"t{temperature}"
        result = CliRunner().invoke(
            main,
            [
                *("probe", "--from-scratch", "--backbone", "test_convnext", "--data", str(data), "--probe", "knn"),
                *("--knn-k", "3", "--knn-temperature", temperature, "--workers", "0", "--quiet", "--out", str(out)),
            ],
        )
        assert result.exit_code == 0, result.output
        reported[temperature] = json.loads((out / "results.json").read_text())["knn"]
    assert reported["0.07"]["k=3"] == 100.0 and reported["10"]["k=3"] == 0.0
    assert (reported["0.07"]["temperature"], reported["10"]["temperature"]) == (0.07, 10.0)


def test_the_linear_head_is_a_batchnorm_without_affine_then_a_linear_layer():
    norm, linear = probe_head("linear", 192, 10)
    assert isinstance(norm, nn.BatchNorm1d) and not norm.affine and norm.num_features == 192
    assert isinstance(linear, nn.Linear) and (linear.in_features, linear.out_features) == (192, 10)


def two_classes(count: int, offset: float, generator: torch.Generator, labels=None) -> tuple:
    """Features whose first dimension is offset +- 1 by class (noise 0.2), the second pure noise."""
    labels = torch.arange(count) % 2 if labels is None else labels
    first = offset + 2.0 * labels - 1.0 + 0.2 * torch.randn(count, generator=generator)
    return torch.stack([first, torch.randn(count, generator=generator)], 1), labels


def test_the_linear_probe_normalises_features_far_from_the_origin():
    """Classes 2 apart at 1000 from the origin: the BatchNorm centres them, so a few epochs separate them; an
    unnormalised linear layer would need a bias of ~1000 times its weight."""
    g = torch.Generator().manual_seed(0)
    train, val = two_classes(200, 1000.0, g), two_classes(50, 1000.0, g)
    torch.manual_seed(0)
    top1 = train_head(probe_head("linear", 2, 2), train, val, 0, epochs=30, batch_size=64, lr=3e-2, weight_decay=0)
    assert top1 == 100.0


def test_the_probe_scores_val_in_eval_mode_with_the_training_statistics():
    """A val set of one class: normalised with the training set's running statistics it stays on its class's side;
    normalised with its own batch statistics (training-mode BatchNorm) it would be centred on the boundary."""
    g = torch.Generator().manual_seed(0)
    train = two_classes(200, 0.0, g)
    val = two_classes(50, 0.0, g, labels=torch.ones(50, dtype=torch.long))
    torch.manual_seed(0)
    head = probe_head("linear", 2, 2)
    top1 = train_head(head, train, val, 0, epochs=30, batch_size=64, lr=3e-2, weight_decay=0)
    assert not head.training
    statistics = head[0].running_mean.clone(), head[0].running_var.clone()
    assert top1 == 100.0
    with torch.no_grad():  # one image alone scores as it did in the batch
        assert head(val[0][:1]).argmax(1).item() == 1
    torch.testing.assert_close((head[0].running_mean, head[0].running_var), statistics)
