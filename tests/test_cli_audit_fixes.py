"""The CLI audit's findings: BatchNorm at batch 1, non-finite buffers, a finished resume into another folder, class
folders that look like a mistake, `export --private` alone, case-insensitive suggestions, an empty --data, task
arguments for a method that uses no task, skipped images named unambiguously, timm's scheduler warning, and
`compare` refusing a pair the backbone cannot take before it times anything."""

import json
import logging
import shutil

import pytest
import timm
import torch
from cli_runs import ONE_STEP, copy_sample_images, fails_cleanly, one_torch_thread, run_cli  # noqa: F401 (autouse)
from torch import nn

from pretexts.engine import PretrainConfig, Pretrainer, load_checkpoint
from pretexts.engine.evaluation.linear_probe_protocol import attach_probe_head
from pretexts.engine.modules.second_order_norm import SecondOrderBatchNorm2d
from pretexts.engine.training.file_writes import write_json
from pretexts.engine.training.nonfinite import check_finite_weights
from pretexts.engine.training.start_checks import check_batchnorm_batch, trained_batchnorms
from pretexts.errors import NonFiniteLossError, ParameterError

BATCH_ONE = "--batch-size 1 cannot train the BatchNorm of this test_resnet model"


# ---- BatchNorm at batch 1 (findings 1 and 2) ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [
        ["train", "--max-steps-per-epoch", "1", "--eval-images", "2", "--monitor-every", "0"],
        ["finetune", "--from-scratch", "--max-steps-per-epoch", "1"],  # a traceback from torch's BatchNorm, before
        ["segment", "--from-scratch", "--data", "generated"],
    ],
)
def test_batch_one_is_refused_on_a_batchnorm_backbone_before_out_is_written(command, tmp_path):
    out = tmp_path / "out"
    args = [*command, "--backbone", "test_resnet", "--batch-size", "1", "--epochs", "1", "--workers", "0"]
    fails_cleanly([*args, "--out", out], BATCH_ONE, "one image gives it one value a channel", "--batch-size 2 or more")
    assert not out.exists()


def test_micro_batches_of_one_image_are_refused_and_two_images_train():
    model = timm.create_model("test_resnet")
    with pytest.raises(ParameterError, match=r"--batch-size 4 \(1 image .*--accum-iter 4\).*use --batch-size 8 or"):
        check_batchnorm_batch(model, 4, 1, 4, "test_resnet", 32, "cpu")
    check_batchnorm_batch(model, 2, 1, 1, "test_resnet", 32, "cpu")  # two images: statistics over two values a channel


def test_one_image_trains_batchnorm_whose_maps_give_it_two_values_a_channel(tmp_path):
    model = timm.create_model("test_resnet")  # its last stage: 1x1 maps at 32 px, 2x2 at 64 px
    check_batchnorm_batch(model, 1, 1, 1, "test_resnet", 64, "cpu")
    pooled = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.BatchNorm1d(4))
    with pytest.raises(ParameterError, match=r"the BatchNorm of this x model \(3: at 64 px"):  # pooled: one value
        check_batchnorm_batch(pooled, 1, 1, 1, "x", 64, "cpu")
    out = tmp_path / "run"
    result, error = run_cli(
        [*ONE_STEP, "--backbone", "test_resnet", "--img-size", "64", "--batch-size", "1", "--out", out]
    )
    assert result.exit_code == 0, error
    weights = load_checkpoint(out / "checkpoint.pt")["model"]
    assert all(torch.isfinite(v).all() for v in weights.values() if v.is_floating_point())


def test_a_linear_probe_trains_only_its_heads_batchnorm_and_the_energy_batchnorm_counts():
    model = timm.create_model("test_resnet", num_classes=3)
    attach_probe_head(model)  # the backbone frozen, in eval mode: its BatchNorm statistics are not trained
    assert trained_batchnorms(model) == ["fc.0"]
    energy = nn.Sequential(nn.Conv2d(3, 4, 3), SecondOrderBatchNorm2d(4))
    assert trained_batchnorms(energy) == ["1"]
    assert trained_batchnorms(timm.create_model("test_convnext")) == []  # LayerNorm: any batch


def test_nonfinite_buffers_stop_the_save():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    model[1].running_var[0] = float("nan")
    with pytest.raises(NonFiniteLossError, match=r"1 buffers \(first: 1.running_var\).*raise --batch-size"):
        check_finite_weights(model, 2, "nowhere")
    model[1].running_var[0] = 1.0
    model[1].num_batches_tracked.fill_(3)  # an integer buffer is never NaN
    check_finite_weights(model, 2, "nowhere")


class NanBufferInEpoch2(Pretrainer):
    """A buffer (as BatchNorm's running variance of one value a channel) that turns NaN in the second epoch while
    the loss stays finite."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.model.register_buffer("running_stat", torch.zeros(1), persistent=False)

    def train_step(self, images):
        stats = super().train_step(images)
        if self.global_step == 2:
            self.model.running_stat.fill_(float("nan"))
        return stats


def test_a_run_whose_buffers_become_nan_stops_and_keeps_its_last_good_checkpoint(tmp_path):
    cfg = PretrainConfig(
        backbone="test_convnext",
        epochs=2,
        batch_size=8,
        max_steps_per_epoch=1,
        workers=0,
        out=str(tmp_path),
        eval_images=2,
        figure_images=2,
        monitor_every=0,
        quiet=True,
    )
    with pytest.raises(NonFiniteLossError, match="running_stat"):
        NanBufferInEpoch2(cfg).run()
    assert load_checkpoint(tmp_path / "checkpoint.pt")["epoch"] == 1
    assert not (tmp_path / "results.json").exists()


# ---- a finished run resumed into another folder (finding 5) --------------------------------------------------------
def test_a_refused_resume_into_another_folder_promises_nothing_first(tmp_path):
    run = tmp_path / "run"
    result, _ = run_cli([*ONE_STEP, "--eval-images", "2", "--monitor-every", "0", "--out", run])
    assert result.exit_code == 0, result.output
    result, error = run_cli([*ONE_STEP, "--resume", run / "checkpoint.pt", "--out", tmp_path / "other"])
    assert result.exit_code == 2 and "would train nothing" in error, result.output
    assert "only the end-of-run outputs are written again" not in result.output
    result, _ = run_cli([*ONE_STEP, "--resume", "--out", run])  # in its own folder the note is true, and said
    assert result.exit_code == 0 and "only the end-of-run outputs are written again" in result.output


# ---- class folders that look like a mistake (finding 8) ------------------------------------------------------------
def test_class_folders_named_like_splits_are_warned_about(tmp_path):
    from pretexts.engine.data.datasets import image_folder

    for split in ("training", "validation"):
        copy_sample_images(tmp_path / "data" / split, 2)
    notes = image_folder(tmp_path / "data").scan.notes
    assert len(notes) == 1 and "training/, validation/" in notes[0] and "named like splits" in notes[0]
    assert "two folders named train/ and val/, each holding the class folders" in notes[0]


def test_a_class_folder_holding_only_subfolders_is_warned_about(tmp_path):
    from pretexts.engine.data.datasets import image_folder

    copy_sample_images(tmp_path / "data" / "animals", 2, classes=("cat", "dog"))
    copy_sample_images(tmp_path / "data", 2, classes=("car",))
    notes = image_folder(tmp_path / "data").scan.notes
    assert len(notes) == 1 and "class folder 'animals'" in notes[0] and "(cat/, dog/)" in notes[0]
    assert f"--data {tmp_path / 'data' / 'animals'}" in notes[0]
    shutil.rmtree(tmp_path / "data" / "animals")
    copy_sample_images(tmp_path / "data" / "boat" / "sub", 1, classes=("x",))  # beside images of its own: fine
    copy_sample_images(tmp_path / "data", 1, classes=("boat",))
    assert image_folder(tmp_path / "data").scan.notes == []
    assert image_folder(tmp_path / "data", labelled=False).scan.notes == []


# ---- small points (findings 9, 10, 11) -----------------------------------------------------------------------------
def test_export_private_without_a_hub_repository_is_refused(tmp_path):
    fails_cleanly(
        ["export", "--checkpoint", tmp_path / "any.pt", "--out", tmp_path / "e", "--private"], "needs --push-to-hub"
    )
    assert not (tmp_path / "e").exists()


def test_a_name_in_another_case_gets_a_suggestion():
    fails_cleanly(["train", "--method", "MAE"], "unknown method 'MAE'", "Did you mean: mae")


@pytest.mark.parametrize(
    "command",
    [
        ["train"],
        ["probe", "--from-scratch", "--backbone", "test_convnext"],
        ["finetune", "--from-scratch", "--backbone", "test_convnext"],
    ],
)
def test_an_empty_data_option_is_refused(command, tmp_path, monkeypatch):
    (tmp_path / "a_folder").mkdir()  # the current folder, which "" read before
    monkeypatch.chdir(tmp_path)
    fails_cleanly([*command, "--data", "", "--out", tmp_path / "out"], "--data (data) must not be empty")
    assert not (tmp_path / "out").exists()


def test_an_empty_data_option_is_refused_by_segment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["segment", "--from-scratch", "--backbone", "test_convnext", "--data", "", "--out", tmp_path / "out"]
    fails_cleanly(args, "--data must not be empty")
    assert not (tmp_path / "out").exists()


def test_results_files_hold_null_for_a_number_that_is_not_finite(tmp_path):
    write_json(tmp_path / "r.json", {"restored_mse": [float("nan"), 0.5], "ratio": float("inf"), "steps": (1, 2)})
    assert json.loads((tmp_path / "r.json").read_text()) == {
        "restored_mse": [None, 0.5],
        "ratio": None,
        "steps": [1, 2],
    }
    assert "NaN" not in (tmp_path / "r.json").read_text()


def test_task_arguments_for_a_method_that_uses_no_task_are_refused(tmp_path):
    args = ["train", "--method", "mae", "--backbone", "test_vit", "--out", tmp_path / "out"]
    fails_cleanly([*args, "--task-arg", "scale=2"], "--task-arg scale: method 'mae'", "uses no task")
    fails_cleanly([*args, "--preset", "x"], "--preset: method 'mae'")
    assert not (tmp_path / "out").exists()


def test_skipped_images_are_named_relative_to_the_data_folder(tmp_path):
    from pretexts.engine.data.datasets import build_source
    from pretexts.engine.data.image_check import report_skipped

    data = tmp_path / "data"
    for split in ("train", "val"):
        copy_sample_images(data / split, 2)
        (data / split / "a" / "bad.jpg").write_bytes(b"not an image")
    sources = [build_source(str(data), split) for split in ("train", "val")]
    note = report_skipped(sources, tmp_path, lambda path, text: path.write_text(text))
    assert f"under '{data}'" in note and "train/a/bad.jpg: " in note and "val/a/bad.jpg: " in note


def test_a_one_step_segmentation_schedule_does_not_warn(tmp_path, caplog):
    args = ["segment", "--from-scratch", "--backbone", "test_convnext", "--data", "generated", "--workers", "0"]
    with caplog.at_level(logging.WARNING, logger="timm"):
        result, _ = run_cli([*args, "--max-steps", "1", "--batch-size", "8", "--out", tmp_path / "s"])
    assert result.exit_code == 0, result.output
    assert not [r for r in caplog.records if "no effect" in r.getMessage()]


def test_compare_refuses_a_pair_the_backbone_cannot_take_before_timing_anything(tmp_path):
    out = tmp_path / "cmp"
    args = ["compare", "--methods", "mae", "--backbone", "test_convnext", "--batch-size", "8", "--out", out]
    result, error = run_cli(args)
    assert result.exit_code == 2 and "MAE needs a ViT backbone" in error, result.output
    assert "estimate" not in result.output and "plan:" not in result.output
    assert not (out / "cells").exists()


def test_compare_leaves_no_empty_cell_folder_when_a_cell_is_refused(tmp_path):
    data = copy_sample_images(tmp_path / "data", 4)  # 8 images: fewer than one batch of 16
    out = tmp_path / "cmp"
    args = ["compare", "--methods", "ae", "--tasks", "random-mask", "--backbone", "test_convnext", "--data", data]
    result, error = run_cli([*args, "--batch-size", "16", "--workers", "0", "--out", out])
    assert result.exit_code == 2 and "fewer than one batch" in error, result.output
    assert not (out / "cells").exists()
