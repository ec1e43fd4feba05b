"""Pretraining checkpoints of fresh models, in `Pretrainer.save`'s format, for the downstream tests."""

from pathlib import Path

import pytest
import torch

import pretexts
from pretexts import backbones
from pretexts.engine import PretrainConfig
from pretexts.engine.methods.autoencoder import AutoencoderModel
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.training.checkpoint import save_checkpoint


def write_checkpoint(
    path: Path,
    backbone: str = "test_convnext",
    task: str = "colorization",
    method: str = "energy",
    task_args: dict | None = None,
    seed: int = 0,
    data: str = "sample",
) -> tuple[Path, torch.nn.Module]:
    """Write `path` with a seeded, untrained model of `method` at 32 px, its config recording `data`; returns it and
    the model."""
    torch.manual_seed(seed)
    cfg = PretrainConfig(backbone=backbone, task=task, method=method, task_args=task_args or {}, data=str(data))
    if method == "ae":
        model = AutoencoderModel(
            backbones.create_backbone(backbone, img_size=32),
            pretexts.create_pretext(task, **cfg.task_args),
            32,
            backbone,
        )
    else:
        model = create_energy_model(backbone, img_size=32, positions="learned")
    save_checkpoint({"config": cfg.to_dict(), "model": model.state_dict()}, path)
    return path, model.eval()


@pytest.fixture
def single_thread():
    """One intra-op thread for a test: on a busy 2-core machine OpenMP's second thread waits more than it works
    (fine-tuning took 6x longer with two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# The paper's recipe regularises for 100 epochs of ImageNet; a few epochs on 320 images need it off.
SMALL_DATA = dict(
    mixup=0,
    cutmix=0,
    randaug="none",
    smoothing=0,
    drop_path=0,
    layer_decay=1.0,
    crop_min_scale=0.5,
    crop_pct=1.0,
    batch_size=16,
    base_lr=8e-3,
    warmup_epochs=0.5,
    workers=0,
)


def finetune_argv(ckpt, out, *extra: str, epochs: int = 1, batch_size: int = 16) -> list[str]:
    """`pretexts finetune` of `ckpt` into `out` for a quick test: one step an epoch, no RandAugment, no loader
    workers, no progress lines; `extra` options added."""
    return [
        "finetune",
        *("--checkpoint", str(ckpt), "--epochs", str(epochs), "--batch-size", str(batch_size)),
        *("--max-steps-per-epoch", "1", "--workers", "0", "--randaug", "none", "--quiet"),
        *extra,
        *("--out", str(out)),
    ]
