"""A user's own folders as they come: images beside class folders, class folders without val/, shards too few for the
default loader workers, parquet cells holding paths, phone photos (EXIF orientation, .heic): each is used as the
docs say and said in one line, never dropped or changed without a word."""

import io
import shutil
from pathlib import Path

import pytest
from cli_runs import ONE_STEP, copy_sample_images, run_cli
from PIL import Image

from pretexts.engine.data.datasets import SAMPLE_DIR, build_source, held_out_split, image_folder
from pretexts.engine.data.image_check import find_scan, load_rgb, report_skipped
from pretexts.engine.data.labelled_data import labelled_splits, labels_of
from pretexts.engine.data.streams import ImageStream, RawSample, decode, first_images, stream_shards
from pretexts.errors import DataError


def write_text(path: Path, text: str) -> None:
    path.write_text(text)


def photos_with_a_stray_folder(root: Path, loose: int = 12, inside: int = 10) -> Path:
    """`loose` images directly in root and `inside` more in root/thumbs/: a photo folder with one subfolder."""
    copy_sample_images(root / "tmp", max(loose, inside), classes=("x",))
    files = sorted((root / "tmp" / "x").iterdir())
    (root / "thumbs").mkdir()
    for path in files[:inside]:
        shutil.copy(path, root / "thumbs" / path.name)
    for path in files[:loose]:
        path.rename(root / path.name)
    shutil.rmtree(root / "tmp")
    return root


def test_images_beside_a_class_folder_are_counted_and_warned_about_in_train(tmp_path):
    data = photos_with_a_stray_folder(tmp_path / "photos")
    folder = image_folder(data, labelled=False)
    assert len(folder) == 10 and folder.scan.loose == 12  # ImageFolder's layout: only thumbs/ is used
    result, error = run_cli([*ONE_STEP, "--data", data, "--eval-images", "8", "--out", tmp_path / "run"])
    assert result.exit_code == 0 and not error, result.output
    first = result.output.splitlines()[0]
    # the start line counts the images found; 5 % of 10 held out is 1, fewer than --eval-images asks
    assert f"data '{data}' (9 train, 1 val image, fewer than --eval-images 8), for 1 epoch ->" in first, first
    assert (
        f"warning: 12 image files lie directly in '{data}' beside its class folder 'thumbs' and are not used"
        in result.output
    )
    assert "Move them into a folder of their own there, or give a folder that holds only them." in result.output


def test_shard_warns_of_images_beside_class_folders_and_claims_no_clean_read(tmp_path):
    data = photos_with_a_stray_folder(tmp_path / "photos", loose=3, inside=4)
    result, error = run_cli(["shard", data, tmp_path / "shards"])
    assert result.exit_code == 0 and not error, result.output
    assert f"warning: 3 image files lie directly in '{data}' beside its class folder 'thumbs'" in result.output
    assert "every file could be read" not in result.output
    assert "skipped 0 unreadable images; left out 3 image files beside class folders." in result.output
    assert "train 4 images in 1; 1 class." in result.output


def test_shards_fewer_than_the_default_workers_get_a_next_line_that_runs(tmp_path):
    data = copy_sample_images(tmp_path / "data", 3)  # 6 images: one shard at the default --shard-size
    out = tmp_path / "shards"
    result, _ = run_cli(["shard", data, out])
    lines = result.output.splitlines()
    assert lines[-1] == f"next: pretexts train --data {out} --workers 1", lines
    assert "1 training shard: each loader worker of each rank reads whole shards" in lines[-2]
    assert "fewer than the default --workers 2; for more, shard again with --shard-size 3." in lines[-2]
    assert "no train/ and val/ folders: every image went to train" in result.output
    result, _ = run_cli(["shard", data, tmp_path / "two", "--shard-size", "3"])
    assert result.output.splitlines()[-1] == f"next: pretexts train --data {tmp_path / 'two'}"
    ran, error = run_cli(
        [*ONE_STEP[:-2], "--batch-size", "2", "--data", out, "--workers", "1", "--out", tmp_path / "run"]
    )
    assert ran.exit_code == 0 and not error, ran.output


def test_too_few_shards_for_ranks_without_workers_says_what_reads(tmp_path):
    from stream_shards import LabelItem, write_shard_set

    shards = stream_shards(str(write_shard_set(tmp_path, [4])), "train")
    with pytest.raises(DataError) as caught:
        ImageStream(shards, LabelItem(), rank=0, world=2, workers=0)
    message = str(caught.value)
    assert message.startswith("1 shard cannot feed 2 ranks with --workers 0 (each rank's process reads) (2 readers)")
    assert "write at least 2 shards" in message and message.endswith("or run at most 1 rank.")
    assert "--workers" not in message.split("(2 readers)")[1]  # no advice to lower workers that are already 0
    with pytest.raises(DataError, match=r"1 shard cannot feed 1 rank x 2 loader workers .* or use --workers 1\.$"):
        ImageStream(shards, LabelItem(), world=1, workers=2)


def class_folders(root: Path, sizes: dict[str, int]) -> Path:
    """Class folders of the given sizes, no val/."""
    for name, count in sizes.items():
        copy_sample_images(root, count, classes=(name,))
    return root


def test_labelled_data_without_val_holds_out_each_class_the_same_whatever_the_seed(tmp_path):
    data = class_folders(tmp_path / "photos", {"big": 40, "mid": 20, "small": 2})
    train, val = labelled_splits(str(data), 32, seed=0)
    again = labelled_splits(str(data), 32, seed=7)[1]
    assert val.indices == again.indices  # --seed varies the initialisation, not the test set
    assert sorted(labels_of(val)) == [0, 0, 1, 2]  # 5 % of each class, at least one: the small class is in val
    assert not set(val.indices) & set(train.indices) and len(train) + len(val) == 62
    note = report_skipped([train, val], tmp_path, write_text)
    assert note == (
        f"'{data}' has no val/ folder: 4 of its 62 images (5 % of each of its 3 class folders, the same draw "
        "whatever --seed) are held out as val; to choose them, give a folder with train/ and val/ class folders."
    )
    # pretraining holds out the same images: a probe never scores on images pretraining trained on
    assert build_source(str(data), "val", seed=3).indices == val.indices


def test_the_held_out_note_reaches_the_probes_output(tmp_path):
    data = class_folders(tmp_path / "photos", {"a": 20, "b": 20})
    result, error = run_cli(
        ["probe", "--from-scratch", "--backbone", "test_convnext", "--probe", "knn", "--knn-k", "5", "--workers", "0"]
        + ["--data", data, "--out", tmp_path / "probe"]
    )
    assert result.exit_code == 0 and not error, result.output
    assert "38 train, 2 val images, 2 classes" in result.output
    assert f"'{data}' has no val/ folder: 2 of its 40 images" in result.output


def test_classes_of_one_image_each_leave_nothing_to_hold_out(tmp_path):
    data = class_folders(tmp_path / "photos", {"a": 1, "b": 1})
    with pytest.raises(DataError, match="each of its class folders holds one image, so none can be held out"):
        labelled_splits(str(data), 32)
    folder = image_folder(data)
    assert len(held_out_split(folder, "val", 0)) == 1  # unlabelled: the share it always was


def test_data_path_and_layout_messages_name_what_is_accepted(tmp_path):
    with pytest.raises(DataError) as caught:
        build_source(str(tmp_path / "nope"), "train")
    for form in ("train/ and val/ class folders", "a folder of images", "shards", "CIFAR-10", "'sample'"):
        assert form in str(caught.value)
    flat = tmp_path / "flat"
    copy_sample_images(tmp_path / "tmp", 3, classes=("x",))
    shutil.move(tmp_path / "tmp" / "x", flat)
    with pytest.raises(DataError, match=r"^no class folders under '.*flat': its images lie directly in it"):
        labelled_splits(str(flat), 32)


def write_parquet_of_paths(folder: Path, paths: list[str]) -> Path:
    """A Hugging Face parquet file whose image cells hold paths (as `to_parquet` writes images loaded from files)."""
    import datasets

    folder.mkdir(parents=True, exist_ok=True)
    cells = [{"bytes": None, "path": path} for path in paths]
    table = datasets.Dataset.from_dict({"image": cells, "label": [0] * len(paths)})
    table.cast_column("image", datasets.Image()).to_parquet(str(folder / "train-00000-of-00001.parquet"))
    return folder


def test_parquet_cells_of_paths_that_name_no_file_are_one_clear_error(tmp_path, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.chdir(tmp_path)  # `datasets` writes and reads the paths from the current folder
    images = copy_sample_images(tmp_path / "imgs", 2, classes=("a",))
    relative = [f"imgs/a/{path.name}" for path in sorted((images / "a").iterdir())]
    shards = stream_shards(str(write_parquet_of_paths(tmp_path / "pq", relative)), "train")
    with pytest.raises(DataError) as caught:
        first_images(shards, 2)
    message = str(caught.value)
    assert "hold file paths, not the images' bytes" in message and f"'{relative[0]}', names no file" in message
    assert f"relative to the parquet file's folder '{tmp_path / 'pq'}'" in message
    assert message.endswith("write the parquet with the images' bytes in its cells, or with absolute paths.")
    # paths that do resolve from the parquet's folder are read
    shutil.copytree(images, tmp_path / "pq" / "imgs")
    assert len(first_images(shards, 2)) == 2


def sideways_jpeg(path: Path) -> Path:
    """A 40 x 20 JPEG whose EXIF says: turn 90 degrees to show it (as phones store portrait photos)."""
    image = Image.new("RGB", (40, 20), (200, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to view
    image.save(path, exif=exif)
    return path


def test_exif_orientation_is_applied_in_folders_and_shards(tmp_path):
    path = sideways_jpeg(tmp_path / "portrait.jpg")
    assert load_rgb(str(path)).size == (20, 40)
    sample = RawSample("train-000000.tar", "0", path.read_bytes(), 0)
    assert decode(sample).size == (20, 40)
    plain = io.BytesIO()
    Image.new("RGB", (40, 20)).save(plain, format="JPEG")
    assert decode(RawSample("s", "1", plain.getvalue(), 0)).size == (40, 20)


def test_photo_formats_the_loader_does_not_read_are_listed_not_dropped(tmp_path):
    data = copy_sample_images(tmp_path / "data", 3)
    (data / "a" / "IMG_0001.HEIC").write_bytes(b"ftypheic")
    folder = image_folder(data)
    assert len(folder) == 6 and find_scan(folder).unread == [str(data / "a" / "IMG_0001.HEIC")]
    note = report_skipped([folder], tmp_path, write_text)
    assert note.startswith("left out 1 file of formats not read (.heic; listed in")
    listed = (tmp_path / "skipped_images.txt").read_text()
    assert listed.startswith(f"{data / 'a' / 'IMG_0001.HEIC'}\t.heic files are not read (only .jpg")


def test_the_sample_still_reads_clean(tmp_path):
    """No note for data without loose images, unread formats or a missing val/."""
    train, val = labelled_splits("sample", 32)
    assert report_skipped([train, val], tmp_path, write_text) is None
    assert len(image_folder(SAMPLE_DIR / "train")) == 320
