"""A file that passes the start-up scan but fails when decoded (a JPEG cut in its pixel data) is listed in
OUT/skipped_images.txt beside the scan's finds, by path and reason, whichever process decoded it: train, finetune
and probe add it after the epoch that met it and at the run's end."""

import numpy as np
import pytest
from cli_runs import TRAIN, copy_sample_images, run_cli
from PIL import Image

from pretexts.engine.data.image_check import SKIPPED_FILE, list_decode_failures

SCRATCH = ["--from-scratch", "--backbone", "test_convnext", "--workers", "0", "--quiet"]
COMMANDS = {
    # 8 training images, one batch: the epoch's one step reads every one, in two loader worker processes
    "train": [*TRAIN, "--epochs", "1", "--workers", "2", "--quiet"],
    "finetune": ["finetune", *SCRATCH, "--epochs", "1", "--batch-size", "4", "--max-steps-per-epoch", "1"],
    "probe": ["probe", *SCRATCH, "--probe", "knn", "--knn-k", "1"],
}


def write_cut_jpeg(path):
    """A JPEG cut in its pixel data: PIL's verify passes it, decoding fails ('image file is truncated')."""
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(path, quality=95)
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.7)])


def data_with_cut_files(root):
    """train/: 7 good images, a cut JPEG and a text file (the scan's find); val/: 2 good images and a cut JPEG."""
    copy_sample_images(root / "train", 4, classes=("a",))
    copy_sample_images(root / "train", 3, classes=("b",))
    copy_sample_images(root / "val", 1, split="val")
    write_cut_jpeg(root / "train" / "b" / "cut.jpg")
    write_cut_jpeg(root / "val" / "b" / "cut.jpg")
    (root / "train" / "a" / "text.jpg").write_text("not an image")
    return root


def listed(out) -> dict[str, str]:
    return dict(line.split("\t") for line in (out / SKIPPED_FILE).read_text().splitlines())


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_file_that_fails_only_when_decoded_joins_the_scans_list(tmp_path, command):
    data, out = data_with_cut_files(tmp_path / "data"), tmp_path / "run"
    result, error = run_cli([*COMMANDS[command], "--data", data, "--out", out])
    assert result.exit_code == 0, error or result.output
    found = listed(out)
    assert list(found)[0] == str(data / "train" / "a" / "text.jpg")  # the scan's list first, kept
    assert found[str(data / "train" / "a" / "text.jpg")] == "cannot identify image file (not an image?)"
    assert found[str(data / "val" / "b" / "cut.jpg")].startswith("image file is truncated")
    if command != "finetune":  # its one step of 4 reads half the training images
        assert found[str(data / "train" / "b" / "cut.jpg")].startswith("image file is truncated")
    assert len(found) == len(set(found)) and set(found) <= {
        str(data / name) for name in ("train/a/text.jpg", "train/b/cut.jpg", "val/b/cut.jpg")
    }


def test_a_run_with_a_readable_scan_still_lists_the_files_cut_in_their_pixel_data(tmp_path):
    """No file for the scan to list: the start removes skipped_images.txt, and the decode failures write it."""
    data, out = data_with_cut_files(tmp_path / "data"), tmp_path / "run"
    (data / "train" / "a" / "text.jpg").unlink()
    result, error = run_cli([*COMMANDS["probe"], "--data", data, "--out", out])
    assert result.exit_code == 0, error or result.output
    assert "unreadable" not in result.output  # the scan found none
    assert sorted(listed(out)) == [str(data / "train" / "b" / "cut.jpg"), str(data / "val" / "b" / "cut.jpg")]


def test_the_workers_records_are_listed_once_and_added_to_the_file_as_it_stands(tmp_path):
    from torch.utils.data import DataLoader

    from pretexts.engine.data.datasets import build_source
    from pretexts.engine.data.loader import AugmentedImages, unaugmented_transform
    from pretexts.engine.training.file_writes import write_text

    copy_sample_images(tmp_path / "data", 2, classes=("a",))
    write_cut_jpeg(tmp_path / "data" / "a" / "0000_cut.jpg")
    dataset = AugmentedImages(build_source(str(tmp_path / "data"), "train").dataset, unaugmented_transform(32))
    out = tmp_path / "run"
    out.mkdir()
    (out / SKIPPED_FILE).write_text("elsewhere/bad\\udcff.png\tempty file (0 bytes)\n")  # as write_text escapes it
    assert list_decode_failures([dataset], out, write_text) == 0  # nothing decoded yet: the file is left as it is
    for _ in range(2):  # two epochs of fresh worker processes
        assert len(list(DataLoader(dataset, batch_size=1, num_workers=2))) == 3
    assert list_decode_failures([dataset, dataset], out, write_text) == 1
    assert list_decode_failures([dataset], out, write_text) == 0  # already listed
    lines = (out / SKIPPED_FILE).read_text().splitlines()
    assert lines[0] == "elsewhere/bad\\udcff.png\tempty file (0 bytes)"
    path, why = lines[1].split("\t")
    assert (path, len(lines)) == (str(tmp_path / "data" / "a" / "0000_cut.jpg"), 2) and why.startswith("image file is")


STREAMED = {  # as COMMANDS, on the shards packed from the folder; train with --workers 0 (the monitor's reads beside)
    "train": [*TRAIN, "--epochs", "1", "--max-steps-per-epoch", "2", "--workers", "0", "--quiet"],
    "finetune": COMMANDS["finetune"],
    "probe": COMMANDS["probe"],
}


@pytest.mark.parametrize("command", list(STREAMED))
def test_a_shards_images_read_into_memory_are_listed_by_the_file_each_was_packed_from(tmp_path, command):
    """The images a command reads whole from shards (pretraining's held-out and monitor images, fine-tuning's val, a
    probe's splits) join the list, by the file's absolute path (the manifest's source folder), warned about once."""
    data, shards, out = data_with_cut_files(tmp_path / "data"), tmp_path / "shards", tmp_path / "run"
    assert run_cli(["shard", data, shards])[0].exit_code == 0  # the scan leaves text.jpg out
    result, error = run_cli([*STREAMED[command], "--data", shards, "--out", out])
    assert result.exit_code == 0, error or result.output
    found, packed = listed(out), data.resolve()
    assert found[str(packed / "val" / "b" / "cut.jpg")].startswith("image file is truncated")
    if command != "finetune":  # its one step of 4 may not reach the training split's cut file
        assert found[str(packed / "train" / "b" / "cut.jpg")].startswith("image file is truncated")
    assert set(found) <= {str(packed / "train" / "b" / "cut.jpg"), str(packed / "val" / "b" / "cut.jpg")}
    for split in ("train", "val"):  # train: the stream and the monitor's images read it, one warning between them
        assert result.output.count(f"(from '{packed / split / 'b' / 'cut.jpg'}')") <= 1, result.output
