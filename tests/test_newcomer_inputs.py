"""A newcomer's own data and folders: a photo folder with a stray subfolder, a list file as --data, shards without
a val split (parquet and WebDataset advice of their own), fine-tuning's train count on shards, and an --out that
already holds a run, refused before the data is read."""

import json
import shutil
from pathlib import Path

import pytest
from cli_runs import ONE_STEP, copy_sample_images, fails_cleanly, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from stream_shards import write_parquet_set, write_shard_set

from pretexts.engine.data.datasets import build_source
from pretexts.engine.data.shard_writer import write_shards
from pretexts.engine.data.stream_inputs import finetune_stream_inputs
from pretexts.errors import DataError

STRAY = "lie directly in '{root}' beside the folder {folder} (holding {held}), which makes it a tree of class folders"


def photos(root: Path, loose: int, stray: str, inside: int) -> Path:
    """`loose` photos directly in root, and a stray subfolder holding `inside` of them (a NAS's @eaDir/, thumbs/)."""
    copy_sample_images(root / "tmp", max(loose, inside, 1), classes=("x",))
    files = sorted((root / "tmp" / "x").iterdir())
    (root / stray).mkdir()
    for path in files[:inside]:
        shutil.copy(path, root / stray / path.name)
    for path in files[:loose]:
        path.rename(root / path.name)
    shutil.rmtree(root / "tmp")
    return root


@pytest.mark.parametrize("labelled", [False, True])
def test_photos_beside_an_empty_stray_folder_are_named_as_the_cause(tmp_path, labelled):
    data = photos(tmp_path / "photos", 6, "thumbs", 0)
    with pytest.raises(DataError) as caught:  # not "no images found in class folder .../thumbs"
        build_source(str(data), "train", labelled=labelled)
    assert str(caught.value) == (
        f"6 images {STRAY.format(root=data, folder='thumbs/', held='no image')} whose loose images are not read; "
        f"move thumbs/ out of it, or put the images in class folders."
    )
    # an empty class folder beside fewer loose images than the others hold keeps its own error
    tree = copy_sample_images(tmp_path / "tree", 5, classes=("a",))
    (tree / "b").mkdir()
    shutil.copy(next((tree / "a").iterdir()), tree / "loose.png")
    with pytest.raises(DataError, match="no images found in class folder .*b; add images or remove the folder"):
        build_source(str(tree), "train", labelled=labelled)


def test_photos_beside_a_one_image_stray_folder_are_named_before_the_val_split_error(tmp_path):
    data = photos(tmp_path / "photos", 6, "@eaDir", 1)
    # not "each of its class folders holds one image, so none can be held out as val"
    error = fails_cleanly([*ONE_STEP, "--data", data, "--out", tmp_path / "run"], "6 images")
    assert STRAY.format(root=data, folder="@eaDir/", held="1 image") in error
    assert error.endswith("move @eaDir/ out of it, or put the images in class folders.")
    assert not (tmp_path / "run").exists()


def test_a_list_of_image_paths_given_as_data_gets_the_forms_data_takes(tmp_path):
    listed = tmp_path / "paths.txt"
    listed.write_text("a.png\nb.png\n")
    error = fails_cleanly([*ONE_STEP, "--data", listed, "--out", tmp_path / "run"], f"data path '{listed}' is a file")
    assert "lists of image paths are not read" in error
    for form in ("a folder with train/ and val/ class folders", "a folder of images (pretraining)", "'sample'"):
        assert form in error, error


def test_parquet_without_val_gets_parquet_advice(tmp_path):
    data = tmp_path / "hf"
    write_parquet_set(data / "data", [12])
    with pytest.raises(DataError) as caught:
        finetune_stream_inputs(str(data), None, 100)
    message = str(caught.value)
    assert f"'{data}' has no val split" in message and "validation*.parquet files (or val*, test*)" in message
    assert "pretexts shard" not in message and "val/ folder" not in message  # its files lie in no train/ folder
    result, error = run_cli([*ONE_STEP, "--data", data, "--out", tmp_path / "run", "--monitor-every", "0"])
    assert result.exit_code == 0 and not error, result.output
    assert f"'{data}' has no val split, so no held-out restoration error is measured; for it, add its held-out " in (
        result.output
    )
    assert "validation*.parquet files (or val*, test*) beside the train*.parquet ones" in result.output
    assert "shard again" not in result.output


def test_webdataset_shards_without_val_are_told_to_shard_again(tmp_path):
    data = write_shard_set(tmp_path / "shards", [8])
    with pytest.raises(DataError) as caught:
        finetune_stream_inputs(str(data), None, 100)
    message = str(caught.value)
    assert "has no val split" in message and "shard again from a folder with train/ and val/ class folders" in message
    assert ".parquet" not in message


def test_finetune_on_shards_says_what_each_train_count_is(tmp_path):
    folder = tmp_path / "photos"
    copy_sample_images(folder / "train", 7)  # 14 training images: one epoch of whole batches of 8 takes 8
    copy_sample_images(folder / "val", 1, split="val")
    write_shards(str(folder), tmp_path / "shards", shard_size=100)
    args = ["finetune", "--from-scratch", "--backbone", "test_convnext", "--img-size", "32", "--batch-size", "8"]
    result, error = run_cli(
        [*args, "--epochs", "1", "--workers", "0", "--data", tmp_path / "shards", "--out", tmp_path / "ft"]
    )
    assert result.exit_code == 0, error or result.output
    first = result.output.splitlines()[0]
    assert ": 14 train images (8 each epoch: whole batches of 8), 2 val images, 2 classes," in first, first
    assert "(auto: 14 training images < 10,000;" in first, first


def fake_run(out: Path) -> Path:
    """A folder holding a run's checkpoint (never read: the refusal comes first)."""
    out.mkdir(parents=True)
    (out / "checkpoint.pt").write_bytes(b"a run's checkpoint")
    return out


def test_train_into_a_folder_holding_a_run_is_refused_before_the_data_is_read(tmp_path):
    out = fake_run(tmp_path / "run")
    missing = tmp_path / "no-such-data"  # read first, it would be refused as missing
    result, error = run_cli([*ONE_STEP, "--data", missing, "--out", out])
    assert result.exit_code == 2 and "output folder" in error and "already holds a run (checkpoint.pt)" in error
    assert "pretraining" not in result.output  # no start line
    assert (out / "checkpoint.pt").read_bytes() == b"a run's checkpoint"
    # --force and --resume pass it as before: the data is read next, or the checkpoint resumed (both refused here)
    fails_cleanly([*ONE_STEP, "--data", missing, "--out", out, "--force"], "data path", "does not exist")
    fails_cleanly([*ONE_STEP, "--data", missing, "--out", out, "--resume"], "is not a checkpoint")
    assert (out / "checkpoint.pt").read_bytes() == b"a run's checkpoint"
    # a run that stopped before saving anything is left to the claim, which starts it over
    (out / "checkpoint.pt").unlink()
    (out / "config.json").write_text(json.dumps({"out": str(out)}))
    (out / "log.jsonl").write_text("")
    fails_cleanly([*ONE_STEP, "--data", missing, "--out", out], "data path", "does not exist")


@pytest.mark.parametrize("layout", ["shards", "folder"])
def test_compare_refuses_data_without_val_before_its_plan(tmp_path, layout):
    data = copy_sample_images(tmp_path / "photos" / "train", 4).parent  # train/ only
    if layout == "shards":
        write_shards(str(data), tmp_path / "shards", shard_size=100)
        data = tmp_path / "shards"
    args = ["compare", "--backbone", "test_convnext", "--steps", "1", "--batch-size", "8", "--workers", "0"]
    result, error = run_cli([*args, "--data", data, "--out", tmp_path / "cmp"])
    assert result.exit_code == 2, result.output
    assert "plan:" not in result.output and not (tmp_path / "cmp").exists()
    expected = "hold no val split; accuracy is measured on val: shard again" if layout == "shards" else "no val/"
    assert expected in error, error


def test_finetune_into_a_folder_holding_a_run_is_refused_before_the_data_is_read(tmp_path):
    out = fake_run(tmp_path / "ft")
    args = ["finetune", "--from-scratch", "--backbone", "test_convnext", "--img-size", "32", "--epochs", "1"]
    result, error = run_cli([*args, "--data", tmp_path / "no-such-data", "--out", out])
    assert result.exit_code == 2 and "already holds a run (checkpoint.pt)" in error, result.output
    assert "fine-tuning" not in result.output  # no start line
    assert (out / "checkpoint.pt").read_bytes() == b"a run's checkpoint"
    config = tmp_path / "run.json"  # a file's force is not taken, and the refusal still says so
    config.write_text(json.dumps({"from_scratch": True, "backbone": "test_convnext", "force": True}))
    result, error = run_cli(["finetune", "--config", config, "--data", tmp_path / "no-such-data", "--out", out])
    assert result.exit_code == 2 and "already holds a run" in error and "its force: true not taken" in result.output


def test_probe_of_parquet_without_val_gets_parquet_advice(tmp_path):
    from pretexts.engine.data.labelled_data import labelled_splits

    data = tmp_path / "hf"
    write_parquet_set(data / "data", [12])
    with pytest.raises(DataError, match=r"hold no val split; .*validation\*\.parquet files \(or val\*, test\*\)"):
        labelled_splits(str(data), 32)
