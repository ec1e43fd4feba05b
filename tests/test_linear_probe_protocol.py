"""`finetune --linear-probe`, MAE's linear-probe protocol: the backbone frozen bit for bit (a CNN's
BatchNorm statistics too), a BatchNorm + linear head trained with timm's LARS on the linprobe recipe, the saved
classifier a plain timm one with the head's logits, and a stopped run resumed to the same weights."""

import copy
import json

import pytest
import timm
import torch
from click.testing import CliRunner
from pretrained_checkpoints import single_thread  # noqa: F401 (a fixture)
from stop_runs import sigterm_at_step
from timm.optim import Lars

import pretexts
from pretexts.cli import main
from pretexts.engine import FinetuneConfig, Finetuner
from pretexts.engine.evaluation.finetune_recipes import FINETUNE_RECIPES
from pretexts.engine.evaluation.linear_probe_protocol import (
    PROTOCOL,
    ProbeHead,
    attach_probe_head,
    classifier_state,
    plain_classifier_state,
)
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

QUICK = dict(data="sample", batch_size=16, max_steps_per_epoch=2, workers=0, quiet=True)


def probe_config(out, backbone: str = "test_resnet", **extra) -> FinetuneConfig:
    return FinetuneConfig(from_scratch=True, backbone=backbone, linear_probe=True, out=str(out), **{**QUICK, **extra})


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """A 2-epoch linear probe of a BatchNorm CNN (timm's test_resnet): the run, and its weights before training."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = Finetuner(probe_config(tmp_path_factory.mktemp("probe"), epochs=2), echo=lambda line: None)
        before = copy.deepcopy(run.model.state_dict())
        run.run()
    finally:
        torch.set_num_threads(threads)
    return run, before


def test_the_backbone_stays_bit_for_bit_and_only_the_head_trains(probed):
    run, before = probed
    after = run.model.state_dict()
    head = {key for key in after if key.startswith("fc.")}  # test_resnet's classifier is `fc`
    assert head == {"fc.0.running_mean", "fc.0.running_var", "fc.0.num_batches_tracked", "fc.1.weight", "fc.1.bias"}
    statistics = [key for key in after if "running_" in key and key not in head]
    assert statistics  # the backbone's own BatchNorm statistics, which a training-mode forward would move
    for key in after.keys() - head:
        assert torch.equal(before[key], after[key]), key
    for key in ("fc.1.weight", "fc.1.bias", "fc.0.running_mean", "fc.0.running_var"):
        assert not torch.equal(before[key], after[key]), key
    assert after["fc.0.num_batches_tracked"] == 4  # 2 epochs of 2 steps
    assert [name for name, p in run.model.named_parameters() if p.requires_grad] == ["fc.1.weight", "fc.1.bias"]


def test_the_head_trains_with_timm_lars_on_maes_recipe(probed):
    run, _ = probed
    cfg, optimizer = run.cfg, run.optimizer
    given = {"epochs"}
    assert cfg.recipe == "linprobe" and run.recipe_note.startswith("recipe linprobe (auto: --linear-probe")
    assert {k: getattr(cfg, k) for k in FINETUNE_RECIPES["linprobe"] if k not in given} == {
        k: v for k, v in FINETUNE_RECIPES["linprobe"].items() if k not in given
    }
    assert (cfg.base_lr, cfg.weight_decay, cfg.warmup_epochs, cfg.crop_min_scale) == (0.1, 0, 10, 0.08)
    assert FINETUNE_RECIPES["linprobe"]["epochs"] == 90
    assert type(optimizer) is Lars
    weights, biases = optimizer.param_groups
    assert weights["params"] == [run.model.fc[1].weight] and biases["params"] == [run.model.fc[1].bias]
    assert weights["always_adapt"] and not biases["always_adapt"]  # MAE's LARS adapts 2-d weights, whatever the decay
    assert {g["weight_decay"] for g in optimizer.param_groups} == {0.0}
    assert {g["momentum"] for g in optimizer.param_groups} == {0.9}
    assert weights["initial_lr"] == pytest.approx(0.1 * 16 / 256)


def test_the_saved_classifier_is_plain_timm_and_gives_the_heads_logits(probed, real_images, tmp_path):
    run, _ = probed
    for name in ("best.pt", "finetuned.pt"):  # the final weights last: those the run's model holds
        ckpt = torch.load(run.out / name, weights_only=True)
        plain = timm.create_model(ckpt["timm_name"], **ckpt["timm_kwargs"])
        plain.load_state_dict(ckpt["model"], strict=True)
    images = (real_images - 0.5) / 0.25
    with torch.no_grad():
        torch.testing.assert_close(plain.eval()(images), run.model.eval()(images), rtol=1e-4, atol=1e-5)
    assert pretexts.export_backbone(str(run.out / "finetuned.pt"), str(tmp_path / "exported"))
    # the resumable checkpoint.pt holds the head's BatchNorm apart; its export is folded into the same classifier
    info = pretexts.export_backbone(str(run.out / "checkpoint.pt"), str(tmp_path / "from_checkpoint.safetensors"))
    exported = timm.create_model(info["timm_name"], pretrained=False, **info["kwargs"])
    exported.load_state_dict(timm.models.load_state_dict(str(tmp_path / "from_checkpoint.safetensors")))
    with torch.no_grad():
        torch.testing.assert_close(exported.eval()(images), run.model.eval()(images), rtol=1e-4, atol=1e-5)
    results = json.loads((run.out / "results.json").read_text())
    assert results["protocol"] == PROTOCOL


def test_the_exports_provenance_says_it_is_a_linear_probe(probed, tmp_path):
    run, _ = probed
    for name in ("finetuned", "checkpoint"):
        pretexts.export_backbone(str(run.out / f"{name}.pt"), str(tmp_path / name))
        provenance = json.loads((tmp_path / name / "pretexts.json").read_text())["fine_tuned"]
        assert provenance["protocol"] == PROTOCOL, name


@pytest.mark.parametrize("backbone", ["test_vit", "test_resnet"])
def test_folding_the_batchnorm_into_the_linear_layer_keeps_the_logits(backbone, real_images):
    torch.manual_seed(0)
    model, _ = create_classifier(None, backbone, 32, "auto", num_classes=10)
    head = attach_probe_head(model)
    norm = head[0]
    norm.running_mean.normal_(0, 2)
    norm.running_var.uniform_(0.01, 5)
    plain, _ = create_classifier(None, backbone, 32, "auto", num_classes=10)
    plain.load_state_dict(classifier_state(model), strict=True)
    # checkpoint.pt keeps the head apart (for --resume); the export's reading folds it the same way
    assert plain_classifier_state(model.state_dict(), plain).keys() == plain.state_dict().keys()
    with torch.no_grad():
        torch.testing.assert_close(plain.eval()(real_images), model.eval()(real_images), rtol=1e-4, atol=1e-5)


def test_a_stopped_linear_probe_resumes_to_the_same_weights(tmp_path):
    """SIGTERM in epoch 2 keeps epoch 1's checkpoint (the head's BatchNorm and LARS's momentum included); --resume
    then equals the uninterrupted run."""
    extra = dict(backbone="test_resnet", epochs=2, max_steps_per_epoch=3, warmup_epochs=0.5)
    straight = Finetuner(probe_config(tmp_path / "straight", **extra), echo=lambda line: None)
    straight.run()
    stopped = Finetuner(probe_config(tmp_path / "stopped", **extra), echo=lambda line: None)
    sigterm_at_step(stopped, 4)  # the second step of epoch 2
    assert stopped.run()["interrupted"] == "SIGTERM"
    resumed = Finetuner(probe_config(tmp_path / "stopped", **extra, resume="auto"), echo=lambda line: None)
    assert isinstance(resumed.model.fc, ProbeHead)
    assert resumed.run()["epochs"] == 2
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name, rtol=0, atol=0)


def test_the_loss_falls_on_the_real_sample(tmp_path):
    """A random convnext_atto's frozen features: LARS moves a weight by about lr x 0.001 of its norm a step, so a
    short run needs --lr at its top."""
    cfg = probe_config(tmp_path, "convnext_atto", epochs=4, lr=1.0, warmup_epochs=0.0, max_steps_per_epoch=None)
    Finetuner(cfg, echo=lambda line: None).run()
    losses = [json.loads(line)["loss"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert losses[-1] < losses[0] - 0.05, losses


def test_what_a_linear_probe_cannot_use_is_refused_in_one_line():
    for options, words in (
        ({"recipe": "paper"}, "--linear-probe takes the linprobe recipe"),
        ({"recipe": "small"}, "not 'small'"),
        ({"layer_decay": 0.75}, "--layer-decay 0.75 would do nothing"),
        ({"drop_path": 0.1}, "--drop-path 0.1 would do nothing"),
        ({"betas": (0.9, 0.95)}, "LARS .* so --betas 0.9 0.95 would do nothing"),
    ):
        with pytest.raises(ParameterError, match=words):
            FinetuneConfig(from_scratch=True, backbone="test_resnet", linear_probe=True, **options)
    with pytest.raises(ParameterError, match="--recipe linprobe is MAE's linear probe: add --linear-probe"):
        FinetuneConfig(from_scratch=True, backbone="test_resnet", recipe="linprobe")
    explicit = FinetuneConfig(from_scratch=True, backbone="test_resnet", linear_probe=True, recipe="linprobe")
    assert (explicit.epochs, explicit.base_lr, explicit.weight_decay) == (90, 0.1, 0.0)


@pytest.mark.parametrize(
    "built, changed",
    [
        ({}, {"linear_probe": True}),  # a fine-tune's weight decay 0.05, layer decay, drop path filled in
        ({"linear_probe": True}, {"linear_probe": False}),  # linprobe's weight decay 0 kept by the fine-tune
        ({"recipe": "small"}, {"recipe": "paper"}),
    ],
)
def test_a_linear_probe_or_recipe_set_after_the_config_was_built_is_refused_at_the_start(tmp_path, built, changed):
    cfg = FinetuneConfig(from_scratch=True, backbone="test_resnet", out=str(tmp_path / "run"), **QUICK, **built)
    [(name, value)] = changed.items()
    setattr(cfg, name, value)
    words = rf"{name} was set to {value!r} after .* built with {name} .*FinetuneConfig\({name}={value!r}, ...\)"
    with pytest.raises(ParameterError, match=words):
        Finetuner(cfg, echo=lambda line: None)
    assert not (tmp_path / "run").exists()
    rebuilt = FinetuneConfig(
        from_scratch=True, backbone="test_resnet", out=str(tmp_path / "rebuilt"), **QUICK, **{**built, **changed}
    )
    assert getattr(Finetuner(rebuilt, echo=lambda line: None).cfg, name) == value  # given when built, it is taken


def test_the_start_line_says_it_is_a_linear_probe(tmp_path):
    argv = ["finetune", "--from-scratch", "--backbone", "test_convnext", "--linear-probe", "--epochs", "1"]
    argv += ["--batch-size", "16", "--max-steps-per-epoch", "1", "--workers", "0", "--quiet", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith(f"{PROTOCOL} of test_convnext from scratch"), first
    assert first.endswith("recipe linprobe (auto: --linear-probe takes MAE's linear-probe recipe; given: --epochs)")
