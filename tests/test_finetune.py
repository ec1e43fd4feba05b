"""Fine-tuning: learns on real images, layer-wise lr decay, label-fraction subsets, pretrained weights, the CLI
(its run folder: test_finetune_runs.py)."""

import dataclasses
import json
from collections import Counter

import pytest
import timm
import torch
from click.testing import CliRunner
from pretrained_checkpoints import SMALL_DATA, finetune_argv, single_thread, write_checkpoint  # noqa: F401 (a fixture)
from timm.scheduler import CosineLRScheduler

from pretexts.backbones import create_backbone
from pretexts.backbones.vit_tokens import sincos_pos_embed
from pretexts.cli import main
from pretexts.engine import FinetuneConfig, Finetuner
from pretexts.engine.data.datasets import build_source
from pretexts.engine.data.labelled_data import class_balanced_subset, labels_of
from pretexts.engine.evaluation.finetune import build_finetune_optimizer, top1_accuracy
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


@pytest.mark.slow
def test_finetuning_a_tiny_backbone_on_the_real_sample_beats_chance(tmp_path):
    cfg = FinetuneConfig(from_scratch=True, backbone="convnext_atto", epochs=4, seed=0, out=str(tmp_path), **SMALL_DATA)
    results = Finetuner(cfg, echo=lambda line: None).run()
    assert len(results["top1"]) == 4 and results["classes"] == 10 and results["val_images"] == 80
    assert results["final_top1"] >= 20.0, results["top1"]  # chance is 10 %
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["final_top1"] == results["final_top1"]
    # the written weights rebuild the classifier with timm alone
    ckpt = torch.load(tmp_path / "finetuned.pt", weights_only=True)
    model = timm.create_model(ckpt["timm_name"], **ckpt["timm_kwargs"])
    timm.models.load_checkpoint(model, str(tmp_path / "finetuned.pt"), strict=True)
    assert ckpt["classes"][0] == "airplane" and model.num_classes == 10


def test_layer_decay_gives_deeper_blocks_larger_learning_rates():
    model = create_backbone("vit_tiny", img_size=32, patch_size=8, depth=3, num_classes=10)
    cfg = FinetuneConfig(from_scratch=True, backbone="vit_tiny", layer_decay=0.75, base_lr=1e-3, batch_size=256)
    optimizer = build_finetune_optimizer(model, cfg)
    CosineLRScheduler(optimizer, t_initial=100, t_in_epochs=False).step_update(0)  # applies each group's lr_scale
    lr_of = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    lrs = (
        [lr_of[id(model.patch_embed.proj.weight)]]
        + [lr_of[id(block.attn.qkv.weight)] for block in model.blocks]
        + [lr_of[id(model.head.weight)]]
    )
    assert lrs[-1] == pytest.approx(1e-3)  # the classifier gets the full lr
    for shallow, deep in zip(lrs, lrs[1:]):
        assert shallow == pytest.approx(0.75 * deep)
    no_decay = [g for g in optimizer.param_groups if any(p is model.pos_embed for p in g["params"])]
    assert no_decay[0]["weight_decay"] == 0.0


def test_defaults_are_the_papers_fine_tuning_recipe():
    """Appendix A, Table A (fine-tuning column): `--recipe paper`."""
    cfg = FinetuneConfig(from_scratch=True, backbone="resnet18", recipe="paper")
    recipe = (
        cfg.base_lr,
        cfg.weight_decay,
        cfg.betas,
        cfg.layer_decay,
        cfg.drop_path,
        cfg.smoothing,
        cfg.mixup,
        cfg.cutmix,
        cfg.randaug,
    )
    assert recipe == (1e-3, 0.05, (0.9, 0.999), 0.75, 0.1, 0.1, 0.8, 1.0, "rand-m9-mstd0.5-inc1-mmax9")
    assert cfg.peak_lr == pytest.approx(1e-3 * 64 / 256)


def test_layer_scales_hold_from_the_first_step_without_warm_up(tmp_path):
    cfg = FinetuneConfig(
        from_scratch=True,
        backbone="vit_tiny",
        img_size=32,
        epochs=1,
        out=str(tmp_path),
        **{**SMALL_DATA, "layer_decay": 0.5, "warmup_epochs": 0.0},
    )
    trainer = Finetuner(cfg, echo=lambda line: None)
    lrs = sorted({round(g["lr"], 12) for g in trainer.optimizer.param_groups})
    assert len(lrs) > 3 and lrs[-1] == pytest.approx(cfg.peak_lr) and lrs[0] < cfg.peak_lr * 0.5**10


def test_top1_counts_the_images_whose_highest_logit_is_their_label():
    """Logits given as the images (an identity model): 3 of 4 right over two batches is 75 %, scored in eval mode
    and the model's mode put back after."""

    class Scored(torch.nn.Identity):
        def forward(self, x):
            self.modes.append(self.training)
            return x

    logits = torch.tensor([[3.0, 1.0, 2.0], [1.0, 3.0, 2.0], [2.0, 1.0, 3.0], [1.0, 3.0, 2.0]])
    labels = torch.tensor([0, 1, 2, 0])  # the last image's highest logit is class 1: wrong
    model = Scored()
    model.modes = []
    loader = [(logits[:2], labels[:2]), (logits[2:], labels[2:])]
    assert top1_accuracy(model, loader, torch.device("cpu")) == 75.0
    assert model.modes == [False, False] and model.training


def test_the_callers_config_stays_as_asked_and_the_run_keeps_what_resolved(tmp_path):
    """A Python caller's config is not the run's record: the recipe `auto` picks is filled into the trainer's copy."""
    cfg = FinetuneConfig(from_scratch=True, backbone="test_convnext", data="sample", epochs=1, out=str(tmp_path))
    asked = dataclasses.asdict(cfg)
    trainer = Finetuner(cfg, echo=lambda line: None)
    assert dataclasses.asdict(cfg) == asked and cfg.recipe == "auto"
    assert trainer.cfg.recipe == "small" and trainer.cfg.base_lr is not None and trainer.cfg is not cfg


def test_a_checkpoint_with_another_backbone_name_is_refused(tmp_path):
    path, _ = write_checkpoint(tmp_path / "ckpt.pt")
    with pytest.raises(ParameterError, match="leave out --backbone"):
        create_classifier(str(path), backbone="resnet18", num_classes=10)


def test_label_fraction_subset_is_class_balanced_and_seeded():
    labels = labels_of(build_source("sample", "train"))
    subset = class_balanced_subset(labels, 0.1, seed=0)
    counts = Counter(labels[i] for i in subset)
    assert sorted(counts) == list(range(10)) and set(counts.values()) == {round(0.1 * 32)}
    assert subset == class_balanced_subset(labels, 0.1, seed=0)
    assert subset != class_balanced_subset(labels, 0.1, seed=1)
    assert set(Counter(labels[i] for i in class_balanced_subset(labels, 0.01, seed=0)).values()) == {1}


def test_label_fraction_trains_on_the_subset_only(tmp_path):
    cfg = FinetuneConfig(
        from_scratch=True,
        backbone="convnext_atto",
        epochs=1,
        label_fraction=0.25,
        max_steps_per_epoch=1,
        out=str(tmp_path),
        **SMALL_DATA,
    )
    assert len(Finetuner(cfg, echo=lambda line: None).train_set) == 80


@pytest.mark.parametrize("method, expected", [("energy", "sincos"), ("ae", "zeros")])
def test_patch_sorting_checkpoint_starts_from_its_position_embedding(tmp_path, method, expected):
    path, pretrained = write_checkpoint(tmp_path / "ckpt.pt", "vit_tiny", "patch-sorting", method, {"edge_max": 1})
    model, saved = create_classifier(str(path), num_classes=10, drop_path_rate=0.1)
    assert saved["task"] == "patch-sorting" and model.num_classes == 10
    torch.testing.assert_close(model.blocks[3].mlp.fc1.weight, pretrained.backbone.blocks[3].mlp.fc1.weight)
    patches = model.pos_embed[0, model.num_prefix_tokens :]
    table = sincos_pos_embed(model.patch_embed.grid_size, model.embed_dim)
    torch.testing.assert_close(patches, table if expected == "sincos" else torch.zeros_like(table))
    assert model.pos_embed.requires_grad  # trainable in fine-tuning (Appendix A.2)


def test_config_asks_for_a_checkpoint_or_from_scratch():
    with pytest.raises(ParameterError, match="--checkpoint"):
        FinetuneConfig()
    with pytest.raises(ParameterError, match="--backbone"):
        FinetuneConfig(from_scratch=True)
    with pytest.raises(ParameterError, match="even batch"):
        FinetuneConfig(from_scratch=True, backbone="resnet18", batch_size=15, recipe="paper")


def test_cli_finetunes_a_checkpoint_and_writes_results(tmp_path):
    path, _ = write_checkpoint(tmp_path / "ckpt.pt")
    out = tmp_path / "ft"
    result = CliRunner().invoke(
        main,
        [
            "finetune",
            "--checkpoint",
            str(path),
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--max-steps-per-epoch",
            "2",
            "--workers",
            "0",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    epoch_lines = [line for line in result.stderr.splitlines() if line.startswith("epoch 1/1  step 2/2  loss ")]
    assert len(epoch_lines) == 1 and " img/s  eta " in epoch_lines[0] and "  val top-1 " in epoch_lines[0]
    results = json.loads((out / "results.json").read_text())
    assert results["optimizer_steps"] == 2 and 0 <= results["final_top1"] <= 100
    assert results["pretraining"]["task"] == "colorization" and (out / "finetuned.pt").is_file()


def test_cli_missing_checkpoint_is_one_line_error_with_exit_code_2(tmp_path):
    for command in (
        ["finetune"],
        ["probe"],
        ["export", "--out", str(tmp_path / "b.safetensors")],
        ["energy", "--out", str(tmp_path / "e.png")],
    ):
        result = CliRunner().invoke(main, command + ["--checkpoint", str(tmp_path / "missing.pt")])
        assert result.exit_code == 2, (command, result.output)
        assert "does not exist" in result.output and len(result.output.strip().splitlines()) == 1


def test_finetune_without_data_uses_the_data_the_checkpoint_was_pretrained_on(tmp_path):
    from cli_runs import tiny_image_folder

    data = tiny_image_folder(tmp_path / "data")  # 2 classes, not the 10-class embedded sample
    ckpt, _ = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext", data=str(data))
    out = tmp_path / "ft"
    result = CliRunner().invoke(main, finetune_argv(ckpt, out, batch_size=8))
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith(f"fine-tuning {ckpt} on '{data}' (the data the weights were trained on"), first
    assert "32 train, 2 val images, 2 classes" in first
    assert json.loads((out / "results.json").read_text())["classes"] == 2
    assert json.loads((out / "config.json").read_text())["data"] == str(data)  # what was used, for --resume too
    # from scratch there is no recorded data: the embedded sample, and the line says why
    cfg = FinetuneConfig(from_scratch=True, backbone="test_convnext", out=str(tmp_path / "s"), **SMALL_DATA)
    scratch = Finetuner(cfg, echo=lambda line: None)
    assert (scratch.cfg.data, scratch.data_origin, len(scratch.classes)) == ("sample", "sample", 10)


def test_a_recorded_data_that_cannot_serve_labels_is_named_with_the_fix(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext", data=str(tmp_path / "gone"))
    result = CliRunner().invoke(main, ["finetune", "--checkpoint", str(ckpt), "--out", str(tmp_path / "ft")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert f"the checkpoint's pretraining data '{tmp_path / 'gone'}' was taken" in result.output
    assert "Give --data DIR" in result.output
