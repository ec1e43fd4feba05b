"""Confusion-matrix mIoU and pixel accuracy, ignoring one label (mmseg's convention, ignore = 255)."""

import torch

IGNORE = 255


def confusion(pred: torch.Tensor, target: torch.Tensor, num_classes: int, ignore: int = IGNORE) -> torch.Tensor:
    """(num_classes, num_classes) counts, rows = truth, columns = prediction; ignored pixels dropped."""
    keep = target != ignore
    t, p = target[keep].long(), pred[keep].long()
    return torch.bincount(t * num_classes + p, minlength=num_classes**2).reshape(num_classes, num_classes)


MIOU, PIXEL_ACC = "miou_percent", "pixel_acc_percent"  # percentages, as every other accuracy pretexts reports


def scores(conf: torch.Tensor) -> dict:
    """mIoU over classes present in truth or prediction (mmseg averages with nan-skipping) and pixel accuracy, in
    percent (keys `miou_percent`, `pixel_acc_percent`; before, `miou` and `pixel_acc` were fractions)."""
    conf = conf.double()
    tp = conf.diag()
    union = conf.sum(0) + conf.sum(1) - tp
    iou = tp[union > 0] / union[union > 0]
    total = conf.sum()
    return {
        MIOU: 100.0 * float(iou.mean()) if iou.numel() else 0.0,
        PIXEL_ACC: 100.0 * float(tp.sum() / total) if total > 0 else 0.0,
    }
