"""Numerics a user meets at the edges: fp16 on the CPU, a NaN before any update, a vanished step size, and
colorization on grayscale data."""

import math
from pathlib import Path

import pytest
import torch
from cli_runs import ONE_STEP, copy_sample_images, fails_cleanly, one_torch_thread  # noqa: F401 (a fixture)
from PIL import Image

from pretexts.engine import PretrainConfig, Pretrainer
from pretexts.engine.methods.report import HeldOut
from pretexts.engine.training.nonfinite import NonFiniteGuard
from pretexts.errors import NonFiniteLossError

TINY = dict(
    backbone="test_convnext",
    img_size=32,
    device="cpu",  # the fp16 and LayerNorm refusal, and float32 arithmetic, are the CPU's
    batch_size=8,
    epochs=1,
    workers=0,
    monitor_every=0,
    eval_images=8,
    figure_images=2,
    quiet=True,
)


def test_fp16_on_the_cpu_is_refused_before_the_run_for_the_energy_on_layernorm(tmp_path):
    # CPU autocast runs LayerNorm in float16, and its second derivative is NaN: every step would be skipped
    args = [*ONE_STEP, "--device", "cpu", "--amp", "fp16", "--out", tmp_path / "run"]
    fails_cleanly(args, "--amp fp16 on the CPU", "LayerNorm", "--amp bf16")
    assert not (tmp_path / "run" / "log.jsonl").exists()


def test_fp16_on_the_cpu_trains_a_vit_whose_token_layernorms_stay_finite(tmp_path):
    run = Pretrainer(PretrainConfig(**{**TINY, "backbone": "test_vit"}, amp="fp16", out=str(tmp_path)))
    stats = run.train_step(torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
    assert not stats.get("skipped") and math.isfinite(stats["loss"])


def test_a_nan_at_step_1_names_the_energys_settings_not_the_lr(tmp_path):
    error = fails_cleanly(
        [*ONE_STEP, "--device", "cpu", "--energy-scale", "1e20", "--out", tmp_path / "run"], "at step 1"
    )
    assert "before any update, so the lr is not the cause" in error and "--energy-scale 1e+20" in error
    assert "--head-init-std" in error and "--alpha 0.1" in error and "--steps 2" in error
    assert "Lower --lr" not in error and "--skip-nonfinite" not in error


def test_a_nan_after_an_update_keeps_the_lr_advice(tmp_path):
    guard = NonFiniteGuard(skip=False, out=tmp_path)
    with pytest.raises(NonFiniteLossError, match=r"at step 1, before any update.*Check the model's settings"):
        guard.should_skip(math.nan, 1)
    with pytest.raises(NonFiniteLossError, match=r"loss is nan at step 5; .*Lower --lr or set --clip-grad"):
        guard.should_skip(math.nan, 5)
    skipping = NonFiniteGuard(skip=True, out=tmp_path, patience=3)
    assert skipping.should_skip(math.nan, 1) and skipping.should_skip(math.inf, 2, "gradient norm")
    with pytest.raises(NonFiniteLossError, match="at step 3, before any update"):  # every step skipped since 1
        skipping.should_skip(math.nan, 3)
    skipping = NonFiniteGuard(skip=True, out=tmp_path, patience=2)
    assert skipping.should_skip(math.nan, 1)  # then an update at step 2
    assert skipping.should_skip(math.nan, 3)
    assert not skipping.should_skip(1.0, 4)  # a finite loss, then an infinite norm: one bad step, the second
    with pytest.raises(NonFiniteLossError, match=r"2 steps in a row \(up to step 4\).*Lower --lr"):
        skipping.should_skip(math.inf, 4, "gradient norm")


def test_a_vanished_alpha_warns_once_with_the_way_out(tmp_path):
    run = Pretrainer(PretrainConfig(**TINY, max_steps_per_epoch=4, lr=1.0, out=str(tmp_path)))
    images = torch.rand(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning) as caught:
        for _ in range(4):
            run.train_step(images)
    lines = [str(w.message) for w in caught]
    alpha = [line for line in lines if line.startswith("alpha, the restoration step size, fell to")]
    assert len(alpha) == 1 and "lower --lr or --alpha-lr-scale" in alpha[0], lines
    assert sum("the gradient is exactly 0" in line for line in lines) <= 1, lines


def test_a_zero_gradient_warns_once(tmp_path):
    run = Pretrainer(PretrainConfig(**TINY, max_steps_per_epoch=4, out=str(tmp_path)))
    run.method.loss = lambda sample: sum(p.sum() for p in run.model.parameters()) * 0.0  # a loss with no gradient
    images = torch.rand(8, 3, 32, 32)
    with pytest.warns(UserWarning, match=r"the gradient is exactly 0 at step 1: .*check --lr") as caught:
        run.train_step(images)
        run.train_step(images)
    assert sum("exactly 0" in str(w.message) for w in caught) == 1


def gray_folder(root: Path) -> Path:
    """The embedded sample images saved as grayscale (mode L) files, read back as RGB with equal channels."""
    for split, count in (("train", 8), ("val", 4)):
        copy_sample_images(root / split, count, split=split)
        for path in (root / split).glob("*/*.png"):
            Image.open(path).convert("L").save(path)
    return root


@pytest.mark.parametrize("task", ["colorization", "mixed"])
def test_colorization_on_grayscale_data_warns_and_prints_no_ratio(tmp_path, task):
    data = gray_folder(tmp_path / "gray")
    settings = {**TINY, "eval_images": 4, "max_steps_per_epoch": 2}
    cfg = PretrainConfig(**settings, data=str(data), task=task, out=str(tmp_path / "run"))
    with pytest.warns(UserWarning, match="colorization: the images have no colour") as caught:
        run = Pretrainer(cfg)
        run.run()
    assert sum("no colour" in str(w.message) for w in caught) == 1
    if task == "colorization":
        assert "(the corrupted input already equals the target: nothing to restore)" in run.held_out_now().format()


def test_colour_data_gives_no_colour_warning(tmp_path, recwarn):
    Pretrainer(PretrainConfig(**TINY, task="colorization", max_steps_per_epoch=1, out=str(tmp_path))).run()
    assert not [w for w in recwarn if "no colour" in str(w.message)]


def test_the_held_out_ratio_is_not_divided_by_zero():
    held = HeldOut(8, 1e-16, [4e-5, 1.3e-4], ("step 1", "step 2"), trivial_mse=1e-16, trivial_restorer="gray")
    assert held.ratio() is None
    assert held.format().endswith("(the corrupted input already equals the target: nothing to restore)")
    assert HeldOut(8, 0.2, [0.1], ("step 1",)).ratio() == pytest.approx(0.5)


def test_the_progress_line_gives_no_ratio_where_there_is_nothing_to_restore():
    from pretexts.engine.training.progress import held_out_ratio

    assert held_out_ratio(HeldOut(8, 1e-16, [4e-5], ("step 1",))) == ""
    assert held_out_ratio(HeldOut(8, 0.2, [0.1], ("step 1",))) == "held-out 0.50x corrupted"
