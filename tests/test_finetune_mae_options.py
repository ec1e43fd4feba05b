"""Fine-tuning options of MAE's recipe beyond Table A: the classifier's pooling (`--global-pool`, the patch tokens'
mean as MAE fine-tunes a ViT) and random erasing (`--reprob`)."""

import pytest
import timm
import torch
from PIL import Image
from pretrained_checkpoints import write_checkpoint

from pretexts.engine.data.labelled_data import train_transform
from pretexts.engine.evaluation.finetune import Finetuner
from pretexts.engine.evaluation.finetune_config import FinetuneConfig
from pretexts.errors import ParameterError

QUICK = dict(data="sample", epochs=1, max_steps_per_epoch=1, workers=0, batch_size=8, recipe="small")


def finetuner(tmp_path, checkpoint, **options) -> Finetuner:
    return Finetuner(FinetuneConfig(checkpoint=str(checkpoint), out=str(tmp_path / "ft"), **{**QUICK, **options}))


def test_a_vit_pretrained_on_its_class_token_fine_tunes_on_the_patch_mean(tmp_path):
    """avg pools the patch tokens into a fresh fc_norm (MAE's fine-tuning); every other weight is the checkpoint's,
    and the finetuned weights rebuild in timm with the pooling they were trained with."""
    checkpoint, pretrained = write_checkpoint(tmp_path / "vit.pt", backbone="vit_tiny")
    run = finetuner(tmp_path, checkpoint, global_pool="avg")
    model = run.model
    assert model.global_pool == "avg" and isinstance(model.norm, torch.nn.Identity)
    assert torch.equal(model.fc_norm.weight, torch.ones_like(model.fc_norm.weight))
    assert torch.equal(model.fc_norm.bias, torch.zeros_like(model.fc_norm.bias))
    loaded = model.state_dict()
    kept = {k: v for k, v in pretrained.backbone.state_dict().items() if not k.startswith(("norm.", "head."))}
    assert kept and all(torch.equal(loaded[k], v) for k, v in kept.items())
    assert run.pool_note.startswith("pooling avg: the checkpoint's final norm (norm) is left out and fc_norm")
    spec = run.timm_spec()
    assert spec["kwargs"]["global_pool"] == "avg"
    rebuilt = timm.create_model(spec["name"], pretrained=False, **spec["kwargs"])
    rebuilt.load_state_dict(model.state_dict())  # strict: the same modules, fc_norm and no norm


@pytest.mark.parametrize("pool", [None, "token"])
def test_the_checkpoints_own_pooling_keeps_its_norm_and_says_nothing(tmp_path, pool):
    """Left out, or the pooling the ViT had anyway: nothing moves, so no note."""
    checkpoint, pretrained = write_checkpoint(tmp_path / "vit.pt", backbone="vit_tiny")
    run = finetuner(tmp_path, checkpoint, global_pool=pool)
    assert run.model.global_pool == "token" and run.pool_note is None
    assert torch.equal(run.model.norm.weight, pretrained.backbone.norm.weight)
    assert run.timm_spec()["kwargs"].get("global_pool") == pool


def test_a_cnn_asked_for_its_own_average_pooling_gets_no_note(tmp_path):
    checkpoint, _ = write_checkpoint(tmp_path / "cnn.pt")
    assert finetuner(tmp_path, checkpoint, global_pool="avg").pool_note is None


def test_pooling_a_cnn_by_a_class_token_or_an_unknown_pooling_is_refused(tmp_path):
    checkpoint, _ = write_checkpoint(tmp_path / "cnn.pt")
    with pytest.raises(ParameterError, match="no class token.*use avg"):
        finetuner(tmp_path, checkpoint, global_pool="token")
    with pytest.raises(ParameterError, match="global_pool must be one of avg, token"):
        FinetuneConfig(checkpoint=str(checkpoint), global_pool="max")


def test_random_erasing_writes_one_box_of_noise_into_the_normalised_image():
    """A uniform gray image stays uniform through crop and flip; erasing at probability 1 puts noise in a box."""
    gray = Image.new("RGB", (32, 32), (128, 128, 128))
    mean, std = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
    plain = train_transform(32, mean, std, None, 0.5, reprob=0.0)(gray)
    erased = train_transform(32, mean, std, None, 0.5, reprob=1.0)(gray)
    assert plain.shape == erased.shape == (3, 32, 32)
    assert plain.std() < 1e-6
    changed = (erased - plain).abs().sum(0) > 1e-3
    rows, cols = changed.any(1).nonzero(), changed.any(0).nonzero()
    assert 0 < changed.sum() < 32 * 32  # a box, not the whole image
    box = changed[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
    assert box.float().mean() > 0.95  # one filled rectangle of per-pixel noise
    with pytest.raises(ParameterError, match="reprob.*0.*1"):
        FinetuneConfig(from_scratch=True, backbone="resnet18", reprob=1.5)
