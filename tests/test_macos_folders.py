"""Folders as macOS and phones leave them: a zip's `__MACOSX/` of AppleDouble stubs is ignored (beside class folders,
inside one, and in a flat photo folder), and a class folder left without a readable image is refused in one line that
says why (its files cannot be read, or are of a format not read), never kept as a class of no image."""

import shutil
from pathlib import Path

import pytest
from cli_runs import copy_sample_images

from pretexts.engine.data.datasets import build_source
from pretexts.engine.data.labelled_data import class_names, labelled_splits
from pretexts.errors import DataError

APPLE_DOUBLE = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + bytes(4000)  # a resource fork's header


def apple_double_stubs(folder: Path, names) -> None:
    """`._NAME` beside each name, as macOS's Archive Utility writes them under __MACOSX/."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"._{name}").write_bytes(APPLE_DOUBLE)


def zipped_on_a_mac(root: Path, classes=("a", "b"), count: int = 4) -> Path:
    copy_sample_images(root, count, classes=classes)
    for name in classes:
        apple_double_stubs(root / "__MACOSX" / name, [p.name for p in (root / name).iterdir()])
    return root


def test_a_macos_zips_metadata_folder_beside_class_folders_is_no_class(tmp_path):
    data = zipped_on_a_mac(tmp_path / "data")
    apple_double_stubs(data / "a" / "__MACOSX", ["x.png"])  # a class folder zipped on its own, unzipped into it
    train, val = labelled_splits(str(data), 32)
    assert class_names(train) == class_names(val) == ["a", "b"]
    scan = train.dataset.scan
    assert len(train) + len(val) == 8 and not scan.bad  # the stubs are not read, so not listed as unreadable
    assert not any("__MACOSX" in note for note in scan.notes)


def test_a_flat_photo_folder_with_a_macos_zips_metadata_folder_is_read_as_photos(tmp_path):
    data = tmp_path / "photos"
    copy_sample_images(data, 10, classes=("x",))
    for path in list((data / "x").iterdir()):
        path.rename(data / path.name)
    (data / "x").rmdir()
    apple_double_stubs(data / "__MACOSX", [p.name for p in data.glob("*.png")])
    train, val = build_source(str(data), "train"), build_source(str(data), "val")
    assert len(train) + len(val) == 10 and not train.dataset.scan.bad


def test_a_class_folder_of_unreadable_files_is_refused_naming_it(tmp_path):
    data = copy_sample_images(tmp_path / "data", 3, classes=("a", "c"))
    (data / "b").mkdir()
    (data / "b" / "one.png").write_bytes(b"")
    (data / "b" / "two.jpg").write_text("not an image")
    with pytest.raises(DataError) as caught:
        labelled_splits(str(data), 32)
    assert str(caught.value) == (
        f"class folder '{data / 'b'}' holds no readable image: its 2 image files cannot be read (one.png: empty file "
        f"(0 bytes); two.jpg: cannot identify image file (not an image?)); replace them, or remove the folder."
    )


def test_pretraining_skips_and_lists_a_subfolder_of_unreadable_files(tmp_path):
    """Unlabelled, the subfolders are not classes: their unreadable files are skipped as any such file is."""
    data = copy_sample_images(tmp_path / "data", 3, classes=("2019", "2020"))
    (data / "2021").mkdir()
    (data / "2021" / "one.png").write_bytes(b"")
    train = build_source(str(data), "train")
    assert len(train) + len(build_source(str(data), "val")) == 6
    assert [Path(p).name for p, _ in train.dataset.scan.bad] == ["one.png"]


def test_a_class_folder_of_heic_photos_is_refused_saying_to_convert_them(tmp_path):
    data = copy_sample_images(tmp_path / "data" / "train", 3, classes=("a", "b")).parent
    copy_sample_images(data / "val", 1, classes=("a", "b"), split="val")
    (data / "train" / "phone").mkdir()
    for i in range(3):
        (data / "train" / "phone" / f"IMG_000{i}.HEIC").write_bytes(b"\x00\x00\x00\x18ftypheic" + bytes(64))
    with pytest.raises(DataError) as caught:
        build_source(str(data), "train")
    message = str(caught.value)
    assert message.startswith(f"class folder '{data / 'train' / 'phone'}' holds no image that is read: its 3 files ")
    assert ".heic files are not read (only .jpg" in message and "convert them to JPEG or PNG" in message


def test_photos_beside_a_folder_of_unreadable_files_are_named_as_the_cause(tmp_path):
    """The stray-folder check counts readable images: a subfolder of stubs holds none."""
    data = tmp_path / "photos"
    copy_sample_images(data, 6, classes=("x",))
    for path in list((data / "x").iterdir()):
        path.rename(data / path.name)
    shutil.rmtree(data / "x")
    apple_double_stubs(data / "resources", [p.name for p in data.glob("*.png")])
    with pytest.raises(DataError) as caught:
        build_source(str(data), "train")
    assert str(caught.value).startswith(f"6 images lie directly in '{data}' beside the folder resources/ (holding no")
