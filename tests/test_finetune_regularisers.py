"""The fine-tuner's regularisers as it builds and uses them, not only as config values: the paper's recipe (Table A)
mixes every batch with timm's Mixup/CutMix into label-smoothed soft targets scored by soft-target CE, and without
mixing the criterion is the label-smoothed CE."""

import math

import pytest
import torch
from pretrained_checkpoints import single_thread  # noqa: F401 (a fixture)
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy

from pretexts.engine import FinetuneConfig, Finetuner

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

TINY = dict(from_scratch=True, backbone="test_convnext", data="sample", batch_size=16, workers=0, quiet=True)


def tuner(tmp_path, **fields) -> Finetuner:
    """A one-epoch, one-step fine-tuner of the 10-class sample with `fields` set."""
    cfg = FinetuneConfig(**{**TINY, "epochs": 1, "max_steps_per_epoch": 1, "out": str(tmp_path), **fields})
    return Finetuner(cfg, echo=lambda line: None)


def smoothed_one_hot(labels: torch.Tensor, classes: int, smoothing: float) -> torch.Tensor:
    """timm's smoothed targets: smoothing / C off the label, 1 - smoothing + smoothing / C on it."""
    off = smoothing / classes
    return torch.full((len(labels), classes), off).scatter(1, labels[:, None], 1 - smoothing + off)


def test_the_paper_recipe_mixes_images_into_smoothed_soft_targets(tmp_path):
    trainer = tuner(tmp_path, recipe="paper")
    cfg, mixup = trainer.cfg, trainer.mixup
    assert (cfg.mixup, cfg.cutmix, cfg.smoothing, cfg.mixup_prob) == (0.8, 1.0, 0.1, 1.0)
    assert isinstance(mixup, Mixup)
    assert (mixup.mixup_alpha, mixup.cutmix_alpha, mixup.mix_prob, mixup.switch_prob) == (0.8, 1.0, 1.0, 0.5)
    assert (mixup.label_smoothing, mixup.num_classes) == (0.1, 10)
    images, labels = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(0)), torch.arange(8)
    mixed, targets = mixup(images.clone(), labels)
    assert not torch.equal(mixed, images)  # every batch is mixed (prob 1): Mixup or CutMix changed the pixels
    # each image's target is lam x its smoothed label + (1 - lam) x its partner's (the batch flipped)
    smooth = smoothed_one_hot(labels, 10, 0.1)
    lam = float((targets[0, 0] - 0.01) / (0.91 - 0.01))  # image 0's own class: lam x on + (1 - lam) x off
    assert 0 < lam < 1
    torch.testing.assert_close(targets, lam * smooth + (1 - lam) * smooth.flip(0))
    assert targets.min() >= 0.01 - 1e-6  # no class gets less than the smoothing's share


def test_a_mixed_step_scores_the_soft_targets_with_soft_target_cross_entropy(tmp_path):
    trainer = tuner(tmp_path, recipe="paper", randaug="none")
    assert isinstance(trainer.criterion, SoftTargetCrossEntropy)
    seen = []
    criterion = trainer.criterion

    def spy(logits, targets):
        seen.append((logits.detach(), targets))
        return criterion(logits, targets)

    trainer.criterion = spy
    loss = trainer.train_epoch()
    ((logits, targets),) = seen
    assert targets.shape == (16, 10) and targets.dtype.is_floating_point  # soft targets, not class indices
    torch.testing.assert_close(targets.sum(1), torch.ones(16))
    assert targets.min() >= 0.01 - 1e-6  # smoothed
    expected = -(targets * logits.log_softmax(-1)).sum(-1).mean()
    assert loss == pytest.approx(expected.item(), rel=1e-5)


def test_without_mixing_the_criterion_is_label_smoothed_cross_entropy(tmp_path):
    """The small recipe: smoothing 0.1, no mixup/cutmix. On confident right logits the smoothed loss keeps a
    floor that plain cross-entropy does not have."""
    trainer = tuner(tmp_path / "small", recipe="small")
    assert trainer.mixup is None and trainer.cfg.smoothing == 0.1
    labels = torch.tensor([0, 3, 9])
    logits = 5.0 * torch.nn.functional.one_hot(labels, 10).float()
    log_total = math.log(math.exp(5.0) + 9)  # the log-sum-exp of each row
    plain = log_total - 5.0  # -log p(label)
    uniform = log_total - 0.5  # mean over the classes of -log p(class): (10 x log_total - 5) / 10
    loss = trainer.criterion(logits, labels).item()
    assert loss == pytest.approx(0.9 * plain + 0.1 * uniform, rel=1e-5)
    assert loss > 5 * plain
    unsmoothed = tuner(tmp_path / "plain", recipe="small", smoothing=0.0)
    assert unsmoothed.criterion(logits, labels).item() == pytest.approx(plain, rel=1e-5)
