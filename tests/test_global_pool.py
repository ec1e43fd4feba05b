"""`--global-pool`: which pooled features the method trains (a ViT's class token or the mean of its patch tokens),
recorded in the checkpoint and taken by every command that rebuilds the backbone (probes, fine-tuning, export)."""

import json

import pytest
import timm
import torch
from cli_runs import fails_cleanly, run_cli
from pretext_images import cifar_batch
from tiny_trainers import tiny_trainer

from pretexts.engine import export_backbone
from pretexts.engine.evaluation.from_checkpoint import load_energy_model
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.loop import Pretrainer
from pretexts.errors import ParameterError

TINY = ["--backbone", "vit_tiny", "--batch-size", "4", "--workers", "0", "--epochs", "1", "--monitor-every", "0"]
TINY += ["--eval-images", "4", "--figure-images", "2"]


def vit_run(tmp_path, pool: str | None) -> Pretrainer:
    return tiny_trainer(tmp_path, backbone="vit_tiny", global_pool=pool)


def test_average_pooling_gives_every_patch_a_direct_path_to_the_energy(tmp_path):
    """With avg the energy reads the patch tokens' mean (timm's fc_norm after it); the step reaches the backbone."""
    run = vit_run(tmp_path / "avg", "avg")
    backbone = run.model.backbone
    assert backbone.global_pool == "avg" and isinstance(backbone.fc_norm, torch.nn.LayerNorm)
    assert vit_run(tmp_path / "token", None).model.backbone.global_pool == "token"
    images = cifar_batch(4)
    tokens = backbone.forward_features(run.model.normalize(images))
    pooled = backbone.fc_norm(tokens[:, backbone.num_prefix_tokens :].mean(1))
    torch.testing.assert_close(run.model.backbone(run.model.normalize(images)), pooled)
    before = [p.detach().clone() for p in backbone.parameters()]
    run.train_step(images)
    assert sum(p.grad.abs().sum() for p in backbone.parameters() if p.grad is not None) > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, backbone.parameters(), strict=True))


def test_the_checkpoints_pooling_reaches_probes_fine_tuning_and_export(tmp_path):
    result, error = run_cli(["train", *TINY, "--max-steps-per-epoch", "1", "--global-pool", "avg", "--out", tmp_path])
    assert result.exit_code == 0, error or result.output
    checkpoint = str(tmp_path / "checkpoint.pt")
    assert json.loads((tmp_path / "config.json").read_text())["global_pool"] == "avg"
    model, saved = create_classifier(checkpoint, num_classes=3)  # probes and fine-tuning build this way
    assert saved["global_pool"] == "avg" and model.global_pool == "avg"
    energy_model, cfg = load_energy_model(checkpoint)
    assert cfg.global_pool == "avg" and energy_model.backbone.global_pool == "avg"
    info = export_backbone(checkpoint, str(tmp_path / "vit.safetensors"))
    assert info["kwargs"]["global_pool"] == "avg"
    exported = timm.create_model(info["timm_name"], pretrained=False, **info["kwargs"])
    exported.load_state_dict(timm.models.load_state_dict(str(tmp_path / "vit.safetensors")))
    images = energy_model.normalize(cifar_batch(2))
    with torch.no_grad():
        torch.testing.assert_close(exported.eval()(images), energy_model.backbone(images))


def test_bad_pooling_is_refused_with_what_to_use(tmp_path):
    fails_cleanly(["train", *TINY, "--global-pool", "max", "--out", tmp_path], "--global-pool", "avg", "token")
    with pytest.raises(ParameterError, match="no class token.*use avg"):
        Pretrainer(PretrainConfig(backbone="convnext_atto", global_pool="token", data="synthetic", out=str(tmp_path)))
    with pytest.raises(ParameterError, match="global_pool must be one of avg, token"):
        PretrainConfig(global_pool="mean")
