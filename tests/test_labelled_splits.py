"""The labelled splits of probe and fine-tune: val/ labelled by train/'s class names, data of one class refused,
and the unreadable images left out, kept in their scan for the run to report."""

import unicodedata

import pytest
from cli_runs import copy_sample_images, fails_cleanly

from pretexts.engine.data.labelled_data import class_names, labelled_splits, labels_of
from pretexts.errors import DataError


def folders(root, train_classes, val_classes):
    copy_sample_images(root / "train", 2, classes=train_classes)
    copy_sample_images(root / "val", 1, classes=val_classes, split="val")
    return root


def test_a_val_class_that_train_lacks_is_named_with_the_fix(tmp_path):
    data = folders(tmp_path / "data", ("cat", "dog"), ("bird", "cat"))
    with pytest.raises(DataError) as caught:
        labelled_splits(str(data), 32)
    message = str(caught.value)
    assert "only in val/: bird; only in train/: dog." in message
    assert "give val/ the same class folders as train/" in message
    assert "\n" not in message


def test_the_cli_refuses_mismatched_classes_in_one_line(tmp_path):
    data = folders(tmp_path / "data", ("cat", "dog"), ("bird", "cat"))
    args = ["--from-scratch", "--backbone", "test_convnext", "--data", data, "--workers", "0"]
    fails_cleanly(["probe", *args, "--out", tmp_path / "probe"], "only in val/: bird", "only in train/: dog")


def test_a_val_subset_is_labelled_by_trains_index_of_the_same_name(tmp_path):
    data = folders(tmp_path / "data", ("bird", "cat", "dog"), ("bird", "dog"))  # val/ leaves out cat
    train, val = labelled_splits(str(data), 32)
    assert class_names(val) == class_names(train) == ["bird", "cat", "dog"]
    by_folder = {path.split("/")[-2]: label for (path, _), label in zip(val.samples, labels_of(val))}
    assert by_folder == {"bird": 0, "dog": 2}  # ImageFolder alone numbers val's dog 1, train's cat
    assert val[len(val) - 1][1] == 2  # what the loaders read: the last sample is a dog


def test_class_names_that_differ_only_in_unicode_normalisation_are_one_class(tmp_path):
    """macOS writes a name decomposed (NFD), Linux and Windows as typed (NFC): the user sees one name."""
    composed, decomposed = unicodedata.normalize("NFC", "Käfer"), unicodedata.normalize("NFD", "Käfer")
    data = folders(tmp_path / "data", ("Ameise", composed), ("Ameise",))
    (data / "val" / "Ameise").rename(data / "val" / decomposed)
    train, val = labelled_splits(str(data), 32)
    assert class_names(val) == class_names(train) == ["Ameise", composed]  # train/'s spelling
    assert labels_of(val) == [1]


def test_the_same_classes_keep_their_labels(tmp_path):
    data = folders(tmp_path / "data", ("a", "b"), ("a", "b"))
    train, val = labelled_splits(str(data), 32)
    assert labels_of(train) == [0, 0, 1, 1] and labels_of(val) == [0, 1]


@pytest.mark.parametrize("layout", ["train-and-val", "class-folders"])
def test_data_of_one_class_is_refused(tmp_path, layout):
    data = tmp_path / "one"
    if layout == "train-and-val":
        folders(data, ("cat",), ("cat",))
    else:  # a folder of class folders: 5 % held out as val
        copy_sample_images(data, 20, classes=("cat",))
    with pytest.raises(DataError, match=r"holds one class \('cat'\); a probe or fine-tune needs at least 2 classes"):
        labelled_splits(str(data), 32)


def test_unreadable_images_are_left_out_and_kept_for_the_run_to_report(tmp_path, capsys):
    """Reported by probe and finetune in their run folder (tests/test_downstream_skipped.py), so `compare`, which
    reads the data for every cell, prints nothing here."""
    data = folders(tmp_path / "data", ("a", "b"), ("a", "b"))
    (data / "train" / "a" / "text.jpg").write_text("not an image")
    (data / "train" / "b" / "zero.png").write_bytes(b"")
    good = next((data / "val" / "a").iterdir()).read_bytes()
    (data / "val" / "b" / "cut.png").write_bytes(good[: len(good) // 2])
    train, val = labelled_splits(str(data), 32)
    assert len(train) == 4 and len(val) == 2
    assert [path for path, _ in train.scan.bad] == [
        str(data / "train" / "a" / "text.jpg"),
        str(data / "train" / "b" / "zero.png"),
    ]
    assert [path for path, _ in val.scan.bad] == [str(data / "val" / "b" / "cut.png")]
    assert capsys.readouterr().err == ""


def test_readable_data_prints_nothing(tmp_path, capsys):
    labelled_splits(str(folders(tmp_path / "data", ("a", "b"), ("a", "b"))), 32)
    assert capsys.readouterr().err == ""
