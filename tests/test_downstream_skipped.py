"""probe and finetune report the unreadable images they left out as train does: OUT/skipped_images.txt (each file's
path and why) and one note; a file that fails only when decoded is replaced by the next, which the warning says
counts twice."""

import numpy as np
import pytest
from cli_runs import copy_sample_images, run_cli
from PIL import Image

from pretexts.engine.data.image_check import SKIPPED_FILE

SCRATCH = ["--from-scratch", "--backbone", "test_convnext", "--workers", "0", "--quiet"]
PROBE = ["probe", *SCRATCH, "--probe", "knn", "--knn-k", "1"]
FINETUNE = ["finetune", *SCRATCH, "--epochs", "1", "--batch-size", "4", "--max-steps-per-epoch", "1"]


def data_with_bad_files(root):
    """2 classes of 2 train and 1 val images, and three unreadable files: text, empty, a PNG cut in half."""
    copy_sample_images(root / "train", 2)
    copy_sample_images(root / "val", 1, split="val")
    (root / "train" / "a" / "text.jpg").write_text("not an image")
    (root / "train" / "b" / "zero.png").write_bytes(b"")
    good = next((root / "val" / "a").iterdir()).read_bytes()
    (root / "val" / "b" / "cut.png").write_bytes(good[: len(good) // 2])
    return root


@pytest.mark.parametrize("command", [PROBE, FINETUNE], ids=["probe", "finetune"])
def test_the_run_folder_lists_each_unreadable_image_and_the_note_is_printed_once(tmp_path, command):
    data, out = data_with_bad_files(tmp_path / "data"), tmp_path / "run"
    result, error = run_cli([*command, "--data", data, "--out", out])
    assert result.exit_code == 0, error or result.output
    assert result.output.count("skipped 3 unreadable images") == 1, result.output
    assert f"(see {out / SKIPPED_FILE}): train/a/text.jpg: cannot identify image file" in result.output
    listed = dict(line.split("\t") for line in (out / SKIPPED_FILE).read_text().splitlines())
    assert list(listed) == [str(data / p) for p in ("train/a/text.jpg", "train/b/zero.png", "val/b/cut.png")]
    assert listed[str(data / "train" / "a" / "text.jpg")] == "cannot identify image file (not an image?)"
    assert listed[str(data / "train" / "b" / "zero.png")] == "empty file (0 bytes)"
    assert "smaller than" not in result.output  # the scan's size is no crop of theirs
    assert SKIPPED_FILE in result.output.splitlines()[-1]  # the "wrote OUT/: ..." line


def test_a_probe_of_readable_data_leaves_no_list_and_a_stale_one_is_removed(tmp_path):
    data, out = data_with_bad_files(tmp_path / "data"), tmp_path / "run"
    assert run_cli([*PROBE, "--data", data, "--out", out])[0].exit_code == 0
    for name in ("train/a/text.jpg", "train/b/zero.png", "val/b/cut.png"):
        (data / name).unlink()
    result, error = run_cli([*PROBE, "--data", data, "--out", out, "--force"])
    assert result.exit_code == 0, error or result.output
    assert "unreadable" not in result.output and not (out / SKIPPED_FILE).exists()


def test_a_probe_rank_other_than_0_writes_and_prints_nothing(tmp_path, capsys):
    """Under torchrun rank 0 alone reports (train's rule); a rank of a one-process world is enough to check it."""
    from pretexts.engine.evaluation.probe import probe_features
    from pretexts.engine.evaluation.probe_config import ProbeConfig

    data, out = data_with_bad_files(tmp_path / "data"), tmp_path / "run"
    cfg = ProbeConfig(
        from_scratch=True, backbone="test_convnext", data=str(data), out=str(out), probes=("knn",), workers=0
    )
    probe_features(cfg, echo=lambda line: None, rank=1)
    assert "unreadable" not in capsys.readouterr().err and not (out / SKIPPED_FILE).exists()


@pytest.mark.parametrize("images", ["pretraining", "labelled"])
def test_a_jpeg_cut_in_its_pixel_data_is_replaced_by_the_next_image_and_said_once_across_epochs_and_workers(
    tmp_path, capfd, images
):
    """Each epoch starts fresh worker processes; the warning still comes once a run, not once an epoch."""
    from torch.utils.data import DataLoader

    from pretexts.engine.data.datasets import build_source
    from pretexts.engine.data.labelled_data import LabelledImages
    from pretexts.engine.data.loader import AugmentedImages, unaugmented_transform

    copy_sample_images(tmp_path, 2, classes=("a",))
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(tmp_path / "a" / "0000_cut.jpg", quality=95)
    whole = (tmp_path / "a" / "0000_cut.jpg").read_bytes()
    (tmp_path / "a" / "0000_cut.jpg").write_bytes(whole[: int(len(whole) * 0.7)])
    folder = build_source(str(tmp_path), "train").dataset
    assert not folder.scan.bad  # the quick check cannot see it
    if images == "pretraining":
        dataset = AugmentedImages(folder, unaugmented_transform(32))
    else:
        dataset = LabelledImages(folder, lambda image: np.asarray(image.resize((32, 32))))
    for _ in range(2):  # two epochs, each with new workers
        assert len([batch for batch in DataLoader(dataset, batch_size=1, num_workers=2)]) == 3
    warning = capfd.readouterr().err
    assert warning.count("0000_cut.jpg' cannot be read: image file is truncated") == 1, warning
    assert warning.rstrip().endswith("Using the next image instead (it counts twice).")


def test_under_torchrun_the_ranks_of_a_node_warn_once_between_them(tmp_path):
    """Every rank reads the held-out images: a file failing there is warned about by one rank, not by each. The ranks
    share the folder (named by their parent, the torchrun agent); rank 0 removes it as it ends."""
    import os
    import subprocess
    import sys
    import tempfile

    script = (
        "from pretexts.engine.data.warn_once import WarnOnce\n"
        "w = WarnOnce()\nw('val/cut.jpg', 'val/cut.jpg cannot be read')\nprint(w.folder)\n"
    )

    def rank(number: int) -> subprocess.CompletedProcess:
        env = {**os.environ, "TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2", "RANK": str(number)}
        env["LOCAL_RANK"] = str(number)
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)

    second, first = rank(1), rank(0)
    assert second.stderr.count("cannot be read") == 1 and "cannot be read" not in first.stderr, first.stderr
    folder = second.stdout.strip()
    assert folder == first.stdout.strip() and folder.startswith(tempfile.gettempdir())
    assert not os.path.exists(folder)  # rank 0 removed it
