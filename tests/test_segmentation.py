"""Segmentation: metrics by hand, head/backbone shapes, layout errors, a fixed batch overfits."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from cli_runs import one_torch_thread  # noqa: F401 (autouse)
from PIL import Image

from pretexts import backbones
from pretexts.engine import load_checkpoint
from pretexts.engine.evaluation.segmentation import train
from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.evaluation.segmentation.data import SegmentationFolder
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.evaluation.segmentation.heads import Segmenter
from pretexts.engine.evaluation.segmentation.metrics import IGNORE, confusion, scores
from pretexts.engine.evaluation.segmentation.train import evaluate, optimizer_for, predict, run
from pretexts.errors import DataError, NonFiniteLossError


def test_miou_hand_computed_with_ignore():
    truth = torch.tensor([0, 0, 1, 1, 2, IGNORE])
    pred = torch.tensor([0, 1, 1, 1, 0, 2])
    # class 0: tp 1, union 3 -> 1/3; class 1: tp 2, union 3 -> 2/3; class 2: tp 0, union 1 -> 0. Ignored pixel dropped.
    s = scores(confusion(pred, truth, 3))
    # percentages, as every accuracy pretexts reports (the old `miou` / `pixel_acc` keys held fractions)
    assert s == {"miou_percent": pytest.approx(100 * (1 / 3 + 2 / 3 + 0) / 3), "pixel_acc_percent": pytest.approx(60.0)}


def test_miou_skips_classes_absent_from_both_truth_and_prediction():
    """mmseg's nan-skipping: a class no pixel has and none is predicted as (ADE20K's many absent classes on a small
    val set) is left out of the mean, not counted as IoU 0; one only predicted is a miss and counts."""
    truth = torch.tensor([0, 0, 1, 1, 2, IGNORE])
    pred = torch.tensor([0, 1, 1, 1, 0, 2])
    three = scores(confusion(pred, truth, 3))
    assert scores(confusion(pred, truth, 5)) == three  # classes 3 and 4: in neither
    assert three["miou_percent"] == pytest.approx(100 * (1 / 3 + 2 / 3 + 0) / 3)
    # the class-2 pixel predicted as 3, never true: class 0 now 1/2 (tp 1, union 2), class 3 counts with IoU 0
    wrong = scores(confusion(torch.tensor([0, 1, 1, 1, 3, 2]), truth, 5))
    assert wrong["miou_percent"] == pytest.approx(100 * (1 / 2 + 2 / 3 + 0 + 0) / 4)


@pytest.mark.parametrize("name", ["vit_tiny", "convnext_atto", "resnet18"])
@pytest.mark.parametrize("head", ["upernet", "linear"])
def test_every_head_backbone_pair_gives_full_size_logits(name, head):
    model = Segmenter(backbones.create_backbone(name, img_size=32), head, 5, 32)
    logits = model(torch.randn(2, 3, 32, 32))
    assert logits.shape == (2, 5, 32, 32)
    logits.mean().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.features.backbone.parameters())


def test_sliding_window_matches_shape_on_larger_images():
    model = Segmenter(backbones.create_backbone("resnet18", img_size=32), "linear", 3, 32).eval()
    assert predict(model, torch.randn(1, 3, 48, 40), 32, "slide").shape == (1, 3, 48, 40)


def test_generated_set_is_seeded_and_masks_match(tmp_path):
    a = write_generated(tmp_path / "a", 3, 1, 32, seed=1)
    b = write_generated(tmp_path / "b", 3, 1, 32, seed=1)
    for rel in ("images/training/00002.png", "masks/training/00002.png"):
        assert np.array_equal(np.array(Image.open(a / rel)), np.array(Image.open(b / rel)))
    data = SegmentationFolder(a, "training", 32, True)
    image, mask = data[0]
    assert image.shape == (3, 32, 32) and mask.shape == (32, 32) and data.num_classes <= 5


def test_bad_masks_name_the_file(tmp_path):
    root = write_generated(tmp_path / "d", 2, 1, 32)
    Image.fromarray(np.zeros((16, 16), np.uint8)).save(root / "masks/training/00000.png")
    with pytest.raises(DataError, match="00000.png"):
        SegmentationFolder(root, "training", 32, False)[0]
    Image.fromarray(np.full((32, 32), 9, np.uint8)).save(root / "masks/training/00000.png")
    with pytest.raises(DataError, match="out of range"):
        SegmentationFolder(root, "training", 32, False, num_classes=5)[0]
    (root / "masks/training/00001.png").unlink()
    with pytest.raises(DataError, match="no mask"):
        SegmentationFolder(root, "training", 32, False)
    with pytest.raises(DataError, match="neither ADE20K"):
        SegmentationFolder(tmp_path, "training", 32, False)


def test_ade20k_zero_is_ignored_and_labels_shift(tmp_path):
    for d in ("images/training", "annotations/training"):
        (tmp_path / d).mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "images/training/x.jpg")
    Image.fromarray(np.array([[0, 1], [150, 2]], np.uint8).repeat(4, 0).repeat(4, 1)).save(
        tmp_path / "annotations/training/x.png"
    )
    _, mask = SegmentationFolder(tmp_path, "training", 8, False)[0]
    assert set(mask.unique().tolist()) == {IGNORE, 0, 149, 1}


def test_fixed_batch_overfits(tmp_path):
    torch.manual_seed(0)
    data = SegmentationFolder(write_generated(tmp_path / "d", 8, 1, 32), "training", 32, False, 5)
    batch = [torch.stack(t) for t in zip(*[data[i] for i in range(8)])]
    model = Segmenter(backbones.create_backbone("resnet18", img_size=32), "upernet", 5, 32)
    opt = optimizer_for(model, SegmentConfig(data="", out="", lr=3e-3, layer_decay=0.9))
    before = evaluate(model, [batch], 5, 32, "whole", "cpu")["miou_percent"]
    for _ in range(10):  # +69 points at 10 steps, measured; 20 asked
        model.train()
        loss = torch.nn.functional.cross_entropy(model(batch[0]), batch[1], ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = evaluate(model, [batch], 5, 32, "whole", "cpu")["miou_percent"]
    assert after > before + 20, (before, after)  # points


def test_a_nan_loss_stops_or_is_skipped_as_in_pretraining(tmp_path, monkeypatch):
    def nan_at_step_2():
        calls = []

        def cross_entropy(*args, **kwargs):
            calls.append(None)
            loss = torch.nn.functional.cross_entropy(*args, **kwargs)
            return loss * float("nan") if len(calls) == 2 else loss

        return SimpleNamespace(cross_entropy=cross_entropy)

    data = write_generated(tmp_path / "d", 8, 2, 32)
    common = dict(data=str(data), backbone="resnet18", img_size=32, head="linear", max_steps=3, batch_size=4)
    monkeypatch.setattr(train, "F", nan_at_step_2())
    with pytest.raises(NonFiniteLossError, match="loss is nan at step 2; .*--clip-grad, or pass --skip-nonfinite"):
        run(SegmentConfig(**common, out=str(tmp_path / "stop")), log=lambda line: None)
    monkeypatch.setattr(train, "F", nan_at_step_2())
    results = run(SegmentConfig(**common, skip_nonfinite=True, out=str(tmp_path / "skip")), log=lambda line: None)
    assert results["skipped_nonfinite_steps"] == 1 and results["steps"] == 3
    assert all(torch.isfinite(w).all() for w in load_checkpoint(tmp_path / "skip" / "segmenter.pt")["model"].values())
