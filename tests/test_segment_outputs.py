"""What `pretexts segment` feeds its backbone and what it reports: the checkpoint's own normalisation (a ViT's 0.5s,
as finetune's), the epoch's mean loss and the lr in log.jsonl (as finetune's), and scores on each original label map
(the prediction resized back to it, as mmsegmentation scores ADE20K)."""

import json

import numpy as np
import pytest
import torch
from cli_runs import one_torch_thread  # noqa: F401 (autouse)
from PIL import Image
from pretrained_checkpoints import write_checkpoint

from pretexts.backbones.normalisation import IMAGENET_MEAN, normalisation
from pretexts.engine.data.labelled_data import eval_transform
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.evaluation.segmentation.data import SegmentationFolder
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.evaluation.segmentation.heads import Segmenter
from pretexts.engine.evaluation.segmentation.metrics import IGNORE
from pretexts.engine.evaluation.segmentation.train import Segmentation, evaluate

QUIET = dict(echo=lambda line: None)


def test_a_vit_checkpoint_is_segmented_from_the_pixels_finetune_feeds_it(tmp_path):
    checkpoint, _ = write_checkpoint(tmp_path / "checkpoint.pt", backbone="test_vit")
    data = write_generated(tmp_path / "d", 2, 1, 32)  # 32 px, the checkpoint's size: no resize on either side
    cfg = SegmentConfig(data=str(data), checkpoint=str(checkpoint), num_classes=5, out=str(tmp_path / "seg"))
    run = Segmentation(cfg, **QUIET)
    finetuned = normalisation(create_classifier(str(checkpoint), resize=True, num_classes=5)[0])  # as finetune reads it
    assert finetuned == ((0.5,) * 3, (0.5,) * 3) and finetuned[0] != IMAGENET_MEAN  # a ViT's own, not ImageNet's
    image, _ = run.val_set[0]
    with Image.open(data / "images" / "validation" / "00000.png") as sample:
        fed_by_finetune = eval_transform(32, *finetuned, crop_pct=1.0)(sample.convert("RGB"))
    assert torch.allclose(image, fed_by_finetune, atol=1e-5)
    assert (run.train_set.mean, run.train_set.std) == (run.val_set.mean, run.val_set.std) == finetuned


def test_from_scratch_the_backbone_s_own_normalisation_is_used(tmp_path):
    data = write_generated(tmp_path / "d", 2, 1, 32)
    cfg = SegmentConfig(
        data=str(data), backbone="test_vit", img_size=32, head="linear", num_classes=5, out=str(tmp_path / "seg")
    )
    run = Segmentation(cfg, **QUIET)
    own = normalisation(run.model.features.backbone)
    assert own == ((0.5,) * 3,) * 2
    with Image.open(data / "images" / "validation" / "00000.png") as sample:
        pixels = torch.from_numpy(np.array(sample.convert("RGB"))).permute(2, 0, 1) / 255
    mean, std = (torch.tensor(values).view(3, 1, 1) for values in own)
    assert torch.allclose(run.val_set[0][0], (pixels - mean) / std, atol=1e-5)


class FixedLogits(torch.nn.Module):
    """Whatever the input, these (1, C, h, w) logits for each image."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits

    def forward(self, images):
        return self.logits.expand(len(images), -1, -1, -1)


def test_a_prediction_is_scored_on_the_original_label_map_after_a_bilinear_resize():
    # 2x2 logits, class 0 on the left column, class 1 on the right; bilinearly resized to 4x4 the columns 0-1 are
    # class 0 (0.75 * 1 + 0.25 * -1 > 0) and 2-3 class 1
    left = torch.tensor([[1.0, -1.0], [1.0, -1.0]])
    model = FixedLogits(torch.stack([left, -left])[None])
    truth = torch.tensor([[0, 0, 0, 1], [0, 0, 1, 1], [0, 0, 1, 1], [IGNORE, 1, 1, 1]])
    results = evaluate(model, [(torch.zeros(1, 3, 2, 2), [truth])], 2, 2, "whole", torch.device("cpu"))
    # 15 pixels scored (one ignored). Class 0: truth 7, predicted 7, both 6 -> IoU 6/8. Class 1: truth 8,
    # predicted 8, both 7 -> IoU 7/9. Right: 13 of 15.
    assert results["miou_percent"] == pytest.approx(100 * (6 / 8 + 7 / 9) / 2)
    assert results["pixel_acc_percent"] == pytest.approx(100 * 13 / 15)


def test_evaluation_keeps_each_label_map_at_its_own_size_even_a_non_square_one(tmp_path):
    for split in ("images/validation", "masks/validation"):
        (tmp_path / split).mkdir(parents=True)
    Image.fromarray(np.zeros((24, 40, 3), np.uint8)).save(tmp_path / "images/validation/x.png")
    Image.fromarray(np.ones((24, 40), np.uint8)).save(tmp_path / "masks/validation/x.png")
    image, mask = SegmentationFolder(tmp_path, "validation", 16, False, 2)[0]
    assert image.shape == (3, 16, 16) and mask.shape == (24, 40)  # whole mode: the image resized, the labels as given
    image, mask = SegmentationFolder(tmp_path, "validation", 16, False, 2, keep_aspect=True)[0]
    assert image.shape == (3, 16, 27) and mask.shape == (24, 40)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A 2-epoch run of 2 steps each at 32 px on 48 px images, the loss of each step it took kept."""
    root = tmp_path_factory.mktemp("segment-outputs")
    data = write_generated(root / "d", 8, 3, 48)
    cfg = SegmentConfig(
        data=str(data), backbone="test_resnet", img_size=32, head="linear", batch_size=4, epochs=2, lr=1e-3
    )
    cfg.out = str(root / "seg")
    lines, losses = [], []
    run = Segmentation(cfg, echo=lines.append)
    step = run.optimizer_step

    def recorded(*args, **kwargs):
        stats = step(*args, **kwargs)
        losses.append(stats.loss)
        return stats

    run.optimizer_step = recorded
    results = run.run()
    rows = [json.loads(line) for line in (root / "seg" / "log.jsonl").read_text().splitlines()]
    return dict(results=results, rows=rows, losses=losses, lines=lines, data=data, out=root / "seg", run=run)


def test_log_jsonl_and_results_give_the_epoch_s_mean_loss_and_the_lr_as_finetune_s(finished):
    rows, losses, lines = finished["rows"], finished["losses"], finished["lines"]
    assert len(losses) == 4 and [row["step"] for row in rows] == [2, 4]
    for row, epoch_losses in zip(rows, (losses[:2], losses[2:])):
        assert row["loss"] == pytest.approx(sum(epoch_losses) / 2)
        # the epoch line prints the same mean and lr
        line = next(line for line in lines if line.startswith(f"epoch {row['epoch']}/2"))
        assert f"loss {row['loss']:.4g}" in line and f"lr {row['lr']:.2e}" in line, line
    assert rows[0]["lr"] > rows[1]["lr"] >= 0  # the poly schedule's, falling to 0 at the last step
    assert finished["results"]["loss"] == rows[-1]["loss"] and finished["results"]["lr"] == rows[-1]["lr"]


def test_a_run_s_scores_are_those_of_its_predictions_on_the_original_label_maps(finished):
    out, data, run = finished["out"], finished["data"], finished["run"]
    saved = torch.load(out / "segmenter.pt", weights_only=False)
    model = Segmenter(create_classifier(None, "test_resnet", 32)[0], "linear", run.classes, 32)
    model.load_state_dict(saved["model"])
    model.eval()
    conf = np.zeros((run.classes, run.classes), np.int64)
    for i, path in enumerate(sorted((data / "masks" / "validation").glob("*.png"))):
        truth = np.asarray(Image.open(path)).astype(np.int64)
        assert truth.shape == (48, 48)
        with torch.no_grad():
            logits = model(run.val_set[i][0][None])  # 32 px
            logits = torch.nn.functional.interpolate(logits, (48, 48), mode="bilinear", align_corners=False)
        np.add.at(conf, (truth.ravel(), logits.argmax(1)[0].numpy().ravel()), 1)
    tp = np.diag(conf)
    union = conf.sum(0) + conf.sum(1) - tp
    miou = 100 * np.mean(tp[union > 0] / union[union > 0])
    assert finished["results"]["miou_percent"] == pytest.approx(miou)
    assert finished["results"]["pixel_acc_percent"] == pytest.approx(100 * tp.sum() / conf.sum())
