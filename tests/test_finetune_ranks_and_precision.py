"""finetune: mixup/cutmix's even batch is checked on each process's share before a torchrun run starts; the loss is
computed in float32 under --amp bf16 on the CPU, as on CUDA."""

import json

import pytest
import torch

from pretexts.engine.evaluation.finetune import Finetuner
from pretexts.engine.evaluation.finetune_config import FinetuneConfig
from pretexts.errors import ParameterError

MIXING = dict(from_scratch=True, backbone="test_vit", recipe="paper")  # Table A: mixup and cutmix


def test_mixup_needs_an_even_share_of_the_batch_on_each_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    cfg = FinetuneConfig(**MIXING, batch_size=6)  # one process: 6 images, 3 pairs
    share = r"share of --batch-size 6, which must be even: over 2 processes it is 3; .* multiple of 4 \(e\.g\. 8\)\.$"
    with pytest.raises(ParameterError, match=share):
        cfg.check_resolved(world=2)
    FinetuneConfig(**MIXING, batch_size=8).check_resolved(world=2)
    FinetuneConfig(from_scratch=True, backbone="test_vit", recipe="small", batch_size=6).check_resolved(world=2)
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it: refused as the config is made, before the run
    with pytest.raises(ParameterError, match=share):
        FinetuneConfig(**MIXING, batch_size=6)
    with pytest.raises(ParameterError, match=r"over 2 processes it is 3\.5; .* multiple of 4 \(e\.g\. 8\)"):
        FinetuneConfig(**MIXING, batch_size=7)


def small_finetune(out, **changes) -> FinetuneConfig:
    """A from-scratch fine-tune on the sample; the small recipe smooths labels (timm's log_softmax)."""
    common = dict(from_scratch=True, backbone="test_convnext", data="sample", recipe="small", epochs=1)
    return FinetuneConfig(**common, batch_size=8, workers=0, quiet=True, out=str(out), **changes)


def test_the_loss_under_bf16_autocast_is_the_float32_criterion_of_the_logits(tmp_path):
    # CPU autocast leaves the smoothed loss's log_softmax in bf16
    cfg = small_finetune(tmp_path / "run", amp="bf16", device="cpu", max_steps_per_epoch=2)
    tuner = Finetuner(cfg, echo=lambda line: None)
    images, labels = torch.randn(8, 3, 32, 32), torch.arange(8) % 10
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = tuner.model(images)
    assert logits.dtype == torch.bfloat16
    loss = tuner.compute_loss((images, labels))
    assert loss.dtype == torch.float32 and loss.item() == tuner.criterion(logits.float(), labels).item()
    tuner.run()
    logged = [json.loads(line)["loss"] for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert logged and all(torch.tensor(value).to(torch.bfloat16).item() != value for value in logged)


class EveryLossNan(Finetuner):
    def compute_loss(self, micro_batch):
        return super().compute_loss(micro_batch) * float("nan")


def test_an_epoch_whose_steps_were_all_skipped_logs_null_not_a_bare_nan(tmp_path):
    cfg = small_finetune(tmp_path / "run", max_steps_per_epoch=1, skip_nonfinite=True)
    assert EveryLossNan(cfg, echo=lambda line: None).run()["skipped_nonfinite_steps"] == 1
    refuse = lambda constant: pytest.fail(f"log.jsonl holds {constant}, which is not JSON")  # noqa: E731
    rows = [
        json.loads(line, parse_constant=refuse) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    ]
    assert [row["loss"] for row in rows] == [None]
