"""`pretexts segment` end to end on the generated set: from a pretraining checkpoint and from scratch."""

import json

from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (autouse)


def test_segment_from_pretraining_checkpoint(tmp_path):
    result, error = run_cli(TRAIN + ["--epochs", "1", "--max-steps-per-epoch", "2", "--out", tmp_path / "pre"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "seg"
    result, error = run_cli(
        [
            "segment",
            "--checkpoint",
            tmp_path / "pre" / "checkpoint.pt",
            "--data",
            "generated",
            "--out",
            out,
            "--max-steps",
            "3",
            "--batch-size",
            "8",
            "--eval-mode",
            "slide",
        ]
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert 0 <= results["miou_percent"] <= 100 and 0 <= results["pixel_acc_percent"] <= 100 and results["steps"] == 3
    assert "miou" not in results  # the fraction's old key is gone, not silently rescaled
    # each printed number says what it is, in percent, as results.json records it
    last = result.output.strip().splitlines()[-2]
    assert last == (
        f"on {results['val_images']} validation images ({results['num_classes']} classes, slide eval): "
        f"mIoU {results['miou_percent']:.2f}%, pixel accuracy {results['pixel_acc_percent']:.2f}%"
    ), last
    assert (out / "predictions.png").stat().st_size > 0
    assert len((out / "log.jsonl").read_text().splitlines()) == 1


def test_segment_from_scratch_and_bad_arguments(tmp_path):
    out = tmp_path / "seg"
    result, _ = run_cli(
        [
            "segment",
            "--from-scratch",
            "--backbone",
            "test_resnet",
            "--img-size",
            "32",
            "--data",
            "generated",
            "--out",
            out,
            "--epochs",
            "2",
            "--max-steps",
            "5",
            "--head",
            "linear",
        ]
    )
    assert result.exit_code == 0, result.output
    assert [json.loads(x)["step"] for x in (out / "log.jsonl").read_text().splitlines()] == [4, 5]
    result, error = run_cli(["segment", "--data", "generated", "--out", out])
    assert result.exit_code == 2 and "exactly one of --checkpoint" in error
    again = ["segment", "--from-scratch", "--backbone", "test_resnet", "--img-size", "32", "--data", "generated"]
    result, error = run_cli([*again, "--head", "linear", "--out", out])
    assert result.exit_code == 2 and "already holds a run" in error and "--force" in error  # never over a run
    assert "continue it with --resume" in error
    result, error = run_cli(["segment", "--out", out, "--resume", "--epochs", "3", "--max-steps", "6"])
    assert result.exit_code == 0, error  # a run from scratch resumes as one, without --from-scratch again
    # the epoch --max-steps 5 cut is finished and reported once, at its new end
    assert [json.loads(x)["step"] for x in (out / "log.jsonl").read_text().splitlines()] == [4, 6]
    result, error = run_cli(
        ["segment", "--from-scratch", "--backbone", "test_resnet", "--data", tmp_path, "--out", tmp_path / "other"]
    )
    assert result.exit_code == 2 and "neither ADE20K" in error
