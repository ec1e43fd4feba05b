"""`finetune` and `probe` --from-scratch start a ViT's patch positions where pretraining starts them (--positions
auto: the sin-cos table), and a pretrained model's reference command names learned positions where it had them."""

import json

import pytest
import torch
from cli_runs import run_cli
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts.backbones.vit_tokens import sincos_pos_embed, starting_positions
from pretexts.engine import FinetuneConfig, Finetuner, ProbeConfig
from pretexts.engine.evaluation.weights import load_backbone
from pretexts.engine.measures.reference import random_init_note
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")

SCRATCH = dict(from_scratch=True, data="sample", epochs=1, batch_size=16, workers=0)


def patch_rows(vit: torch.nn.Module) -> torch.Tensor:
    return vit.pos_embed.detach()[0, vit.num_prefix_tokens :]


def test_a_vit_from_scratch_starts_from_the_table_and_trains_it(tmp_path):
    tuner = Finetuner(FinetuneConfig(backbone="vit_tiny", out=str(tmp_path), **SCRATCH), echo=lambda line: None)
    vit = tuner.model
    torch.testing.assert_close(patch_rows(vit), sincos_pos_embed(vit.patch_embed.grid_size, vit.embed_dim))
    assert tuner.cfg.positions == "sincos"  # config.json records what auto resolved to
    assert vit.pos_embed.requires_grad  # fine-tuning trains the table on, as it does a pretrained one
    images, labels = next(iter(torch.utils.data.DataLoader(tuner.train_set, batch_size=8)))
    torch.nn.functional.cross_entropy(vit(images), labels).backward()
    assert vit.pos_embed.grad[0, vit.num_prefix_tokens :].abs().sum() > 0


def test_learned_positions_and_cnns_keep_timms_init(tmp_path):
    learned = Finetuner(
        FinetuneConfig(backbone="vit_tiny", positions="learned", out=str(tmp_path / "v"), **SCRATCH),
        echo=lambda line: None,
    )
    assert starting_positions(learned.model) == "learned" and learned.cfg.positions == "learned"
    cnn_cfg = FinetuneConfig(backbone="test_convnext", out=str(tmp_path / "c"), **SCRATCH)
    cnn = Finetuner(cnn_cfg, echo=lambda line: None)
    assert cnn.cfg.positions == "learned" and starting_positions(cnn.model) is None
    with pytest.raises(ParameterError, match="needs a ViT backbone with absolute position embeddings.*resnet18"):
        Finetuner(FinetuneConfig(backbone="resnet18", positions="sincos", out=str(tmp_path / "r"), **SCRATCH))


def test_positions_go_with_from_scratch_only(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext")
    with pytest.raises(ParameterError, match="--positions learned .* goes with --from-scratch"):
        FinetuneConfig(checkpoint=str(ckpt), positions="learned")
    with pytest.raises(ParameterError, match="--positions sincos .* goes with --from-scratch"):
        ProbeConfig(checkpoint=str(ckpt), positions="sincos")
    with pytest.raises(ParameterError, match="must be auto, learned or sincos; got 'table'"):
        FinetuneConfig(from_scratch=True, backbone="vit_tiny", positions="table")


def test_a_random_init_probe_of_a_vit_has_the_table_unless_asked():
    table = load_backbone(None, backbone="vit_tiny", img_size=32, positions="auto")
    assert table.positions == "sincos" and "with the sin-cos position table" in table.source
    assert load_backbone(None, backbone="vit_tiny", img_size=32).positions == "learned"


def test_the_reference_command_names_learned_positions_where_the_weights_had_them(tmp_path):
    path, _ = write_checkpoint(tmp_path / "learned.pt", "test_vit", "random-mask")  # timm's learned positions
    out = tmp_path / "probe"
    result, _ = run_cli(["probe", "--checkpoint", path, "--probe", "knn", "--workers", "0", "--quiet", "--out", out])
    assert result.exit_code == 0, result.output
    hint = "`pretexts probe --from-scratch --backbone test_vit --img-size 32 --positions learned --data sample`"
    assert f"random init not measured here: {hint}" in result.output
    table = create_energy_model("vit_tiny", img_size=32, depth=1, positions="sincos")  # as the default trains
    assert starting_positions(table.backbone) == "sincos"
    assert "--positions" not in random_init_note("probe", False, "vit_tiny", "sample", 32, "sincos")
    reference = json.loads((out / "results.json").read_text())["reference"]["random_init"]
    assert "--positions learned" in reference
