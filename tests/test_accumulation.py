"""--accum-iter K: the step of the whole batch, computed K micro-batches at a time (MAE's accum_iter)."""

import pytest
import torch
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts.engine import FinetuneConfig, PretrainConfig, Pretrainer, finetune, load_checkpoint
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")


def close_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-6, msg=key)


def test_pretraining_with_accumulation_equals_the_larger_batch(tmp_path):
    # colorization is deterministic per image and test_convnext (LayerNorm) has no BatchNorm: micro-batches see the
    # same images and corruptions as the whole batch
    common = dict(
        backbone="test_convnext",
        task="colorization",
        batch_size=16,
        epochs=1,
        max_steps_per_epoch=3,
        workers=0,
        warmup_epochs=0.0,
        lr=1e-3,
        monitor_every=0,
        eval_images=16,
        figure_images=2,
    )
    whole = Pretrainer(PretrainConfig(**common, out=str(tmp_path / "whole")))
    whole.run()
    accumulated = Pretrainer(PretrainConfig(**common, accum_iter=4, out=str(tmp_path / "accum")))
    accumulated.run()
    a, b = load_checkpoint(tmp_path / "whole/checkpoint.pt"), load_checkpoint(tmp_path / "accum/checkpoint.pt")
    close_weights(a["model"], b["model"])
    assert a["history"]["loss"].tolist() == pytest.approx(b["history"]["loss"].tolist(), rel=1e-5)
    start = Pretrainer(PretrainConfig(**common, out=str(tmp_path / "init"))).model.state_dict()
    assert not torch.equal(start["head.weight"], a["model"]["head.weight"]), "the weights must have trained"


def test_fine_tuning_with_accumulation_equals_the_larger_batch(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    common = dict(
        checkpoint=str(ckpt),
        epochs=1,
        max_steps_per_epoch=2,
        batch_size=16,
        workers=0,
        mixup=0,
        cutmix=0,
        randaug="none",
        drop_path=0,
        smoothing=0.1,
        seed=0,
    )
    finetune(FinetuneConfig(**common, out=str(tmp_path / "whole")), echo=lambda line: None)
    finetune(FinetuneConfig(**common, accum_iter=2, out=str(tmp_path / "accum")), echo=lambda line: None)
    close_weights(
        *(torch.load(tmp_path / run / "finetuned.pt", weights_only=False)["model"] for run in ("whole", "accum"))
    )


def test_accumulation_must_split_the_batch_evenly(tmp_path):
    with pytest.raises(ParameterError, match="accum-iter 3 must divide --batch-size 16"):
        FinetuneConfig(from_scratch=True, backbone="resnet18", batch_size=16, accum_iter=3)
    with pytest.raises(ParameterError, match=r"accum_iter must be in \[1, 65536\], got 0"):
        PretrainConfig(accum_iter=0)
    with pytest.raises(ParameterError, match="accum-iter 3 must divide each process's batch of 16"):
        Pretrainer(PretrainConfig(batch_size=16, accum_iter=3, workers=0, out=str(tmp_path)))
