"""The autoencoder baseline: same backbone and corruption, a light decoder, gradients into the backbone."""

import json

import pytest
import torch
from click.testing import CliRunner
from pretrained_checkpoints import single_thread  # noqa: F401 (a fixture)

import pretexts
from pretexts import backbones
from pretexts.base import Corrupted, Pretext
from pretexts.cli import main
from pretexts.engine import PretrainConfig, Pretrainer
from pretexts.engine.methods.autoencoder import AutoencoderMethod, AutoencoderModel
from pretexts.engine.methods.states import state_adapter
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


def trainer(tmp_path, backbone: str, task: str, **task_args) -> Pretrainer:
    cfg = PretrainConfig(
        method="ae",
        backbone=backbone,
        task=task,
        task_args=task_args,
        batch_size=8,
        workers=0,
        lr=1e-3,
        warmup_epochs=0,
        out=str(tmp_path),
        eval_images=16,
        figure_images=2,
    )
    return Pretrainer(cfg)


@pytest.mark.parametrize(
    "backbone, task, args",
    [
        ("convnext_atto", "colorization", {}),
        ("vit_tiny", "super-resolution", {"scale": 4}),
        ("vit_tiny", "patch-sorting", {"edge_max": 1}),
    ],
)
def test_a_training_step_reaches_the_backbone(tmp_path, real_images, backbone, task, args):
    run = trainer(tmp_path, backbone, task, **args)
    assert isinstance(run.method, AutoencoderMethod) and not hasattr(run.model, "alpha")
    before = {n: p.detach().clone() for n, p in run.model.backbone.named_parameters()}
    stats = run.train_step(real_images[:8])
    assert torch.isfinite(torch.tensor(stats["loss"]))
    grads = [p.grad for p in run.model.backbone.parameters() if p.grad is not None]
    assert grads and sum(g.abs().sum() for g in grads) > 0
    changed = [n for n, p in run.model.backbone.named_parameters() if not torch.equal(before[n], p)]
    assert len(changed) > len(before) // 2


def test_reconstruction_loss_falls_on_a_fixed_batch(tmp_path, real_images):
    run = trainer(tmp_path, "convnext_atto", "denoising")
    losses = [run.train_step(real_images[:8])["loss"] for _ in range(8)]
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.slow
def test_cnn_decoder_reads_the_stages_and_beats_its_input_after_a_short_overfit(real_images):
    """At 32 px a ConvNeXt's last map is 1 x 1; the pyramid decoder's reconstruction must still beat the
    grayscale input it was given (a decoder of the last map alone stayed 3-5x worse)."""
    torch.manual_seed(0)
    task = pretexts.create_pretext("colorization")
    model = AutoencoderModel(backbones.create_backbone("convnext_atto", img_size=32), task, 32, "convnext_atto")
    assert model.decoder.features.channels == [40, 80, 160, 320] and model.decoder.stride == 4
    sample = task(real_images[:8])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(100):
        prediction, target = model.reconstruct(sample)
        loss = torch.nn.functional.mse_loss(prediction, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        prediction, target = model.eval().reconstruct(sample)
    corrupted = torch.nn.functional.mse_loss(sample.state, target)
    assert torch.nn.functional.mse_loss(prediction, target) < 0.75 * corrupted


def test_decoder_size_is_a_method_argument_checked_like_task_parameters(tmp_path):
    cfg = dict(method="ae", backbone="vit_tiny", task="colorization", batch_size=8, workers=0, out=str(tmp_path))
    model = Pretrainer(
        PretrainConfig(**cfg, method_args={"decoder_dim": "64", "decoder_depth": "1", "decoder_heads": "2"})
    ).model
    assert len(model.decoder.blocks) == 1 and model.decoder.embed.out_features == 64
    with pytest.raises(ParameterError, match=r"decoder_dim.*\[8, 4096\]"):
        Pretrainer(PretrainConfig(**cfg, method_args={"decoder_dim": "0"}))
    with pytest.raises(ParameterError, match="not divisible by decoder_heads"):
        Pretrainer(PretrainConfig(**cfg, method_args={"decoder_dim": "64", "decoder_heads": "3"}))


def test_pixel_decoder_rebuilds_an_image_and_sorting_decoder_predicts_positions(real_images):
    images = real_images[:2]
    for name, kwargs in [("convnext_atto", {}), ("vit_tiny", {"patch_size": 8, "depth": 2})]:
        task = pretexts.create_pretext("gridded-mask", grid=8)
        model = AutoencoderModel(backbones.create_backbone(name, img_size=32, **kwargs), task, 32, name)
        prediction, target = model.reconstruct(task(images))
        assert prediction.shape == target.shape == images.shape
    vit = backbones.create_backbone("vit_tiny", img_size=32, patch_size=8, depth=2)
    sorting = pretexts.create_pretext("patch-sorting", edge_max=1, drop=0.5)
    model = AutoencoderModel(vit, sorting, 32, "vit_tiny")
    state_adapter(sorting, model).prepare()
    sample = sorting(images)
    prediction, target = model.train().reconstruct(sample)
    assert prediction.shape == target.shape == (2, 8, 192)  # the kept half of 16 patches
    prediction, target = model.eval().reconstruct(sample)
    assert prediction.shape == target.shape == (2, 16, 192)


def test_sorting_encoder_ignores_the_vit_position_embedding(real_images):
    vit = backbones.create_backbone("vit_tiny", img_size=32, patch_size=8, depth=2)
    sorting = pretexts.create_pretext("patch-sorting", edge_max=1)
    model = AutoencoderModel(vit, sorting, 32, "vit_tiny").eval()
    sample = state_adapter(sorting, model).prepare()(real_images[:2])
    first, _ = model.reconstruct(sample)
    with torch.no_grad():
        vit.pos_embed.normal_()
    torch.testing.assert_close(model.reconstruct(sample)[0], first)


class TurnRight(Pretext):
    """A task whose state is not pixels (an angle), which no decoder here reconstructs."""

    name = "turn-right"
    state_kind = "angle"

    def corrupt(self, images, generator=None):
        return Corrupted(state=torch.zeros(images.shape[0]), target=torch.ones(images.shape[0]), context=images)


def test_tasks_without_a_decoder_target_are_refused():
    with pytest.raises(ParameterError, match="reconstructs pixels"):
        AutoencoderModel(backbones.create_backbone("resnet18"), TurnRight(), 32, "resnet18")
    with pytest.raises(ParameterError, match="ViT"):
        AutoencoderModel(
            backbones.create_backbone("resnet18"), pretexts.create_pretext("patch-sorting"), 32, "resnet18"
        )


def test_cli_train_method_ae_writes_checkpoint_figure_and_reconstruction_error(tmp_path):
    out = tmp_path / "ae"
    result = CliRunner().invoke(
        main,
        [
            "train",
            "--method",
            "ae",
            "--task",
            "colorization",
            "--backbone",
            "convnext_atto",
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
    assert "held-out reconstruction MSE on 80 images: corrupted" in result.output and "step 1" not in result.output
    held = json.loads((out / "results.json").read_text())["held_out"]
    assert held["method"] == "ae" and len(held["restored_mse"]) == 1
    assert (out / "reconstruction_epoch001.png").stat().st_size > 0 and (out / "checkpoint.pt").is_file()


def test_cli_unknown_method_is_a_one_line_error():
    result = CliRunner().invoke(main, ["train", "--method", "vae"])
    assert result.exit_code == 2 and "unknown method 'vae'" in result.output and "ae" in result.output
