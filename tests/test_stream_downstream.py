"""What needs a whole split reads the first --max-images of streamed shards and says so: the probes (their line and
results.json), `pretexts compare` end to end on shards; `pretexts segment` refuses shards, which hold no masks."""

import json
import shutil
import tarfile

import pytest
import webdataset as wds
from cli_runs import copy_sample_images, fails_cleanly, one_torch_thread, run_cli  # noqa: F401 (a fixture)

from pretexts.engine.data.labelled_data import class_names, labelled_splits, labels_of
from pretexts.engine.data.shard_writer import write_shards
from pretexts.errors import DataError

PROBE = ["probe", "--from-scratch", "--backbone", "test_convnext", "--workers", "0"]
FIRST = 40  # the first 40 of each split hold every one of the 10 classes (asserted below)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """The embedded sample (320 train, 80 val images, 10 classes) as `pretexts shard` writes it: shuffled, in
    shards of 100 images."""
    out = tmp_path_factory.mktemp("stream") / "shards"
    write_shards("sample", out, shard_size=100)
    return out


def first_samples(shards, split: str, count: int) -> list[tuple[str, bytes, int]]:
    """(key, PNG bytes, label) of the first `count` samples of a split's first shard, in its order."""
    found = {}
    with tarfile.open(shards / f"{split}-000000.tar") as tar:
        for member in tar:
            key, ext = member.name.split(".", 1)
            found.setdefault(key, {})[ext] = tar.extractfile(member).read()
    return [(key, parts["png"], int(parts["cls"])) for key, parts in list(found.items())[:count]]


def probe(data, out, *args) -> tuple[str, dict]:
    result, error = run_cli([*PROBE, "--data", data, "--out", out, *args])
    assert result.exit_code == 0, error or result.output
    return result.output, json.loads((out / "results.json").read_text())


def test_a_probe_reads_the_first_max_images_of_each_split_and_says_so(shards, tmp_path):
    output, results = probe(shards, tmp_path / "out", "--max-images", FIRST, "--probe", "linear", "--epochs", "5")
    assert results["images"] == {"train": FIRST, "val": FIRST, "of": {"train": 320, "val": 80}}
    assert results["train_images"] == results["val_images"] == FIRST and results["classes"] == 10
    assert 0.0 <= results["linear"]["top1"] <= 100.0
    first_line = next(line for line in output.splitlines() if line.startswith("probing "))
    assert f"{FIRST} train, {FIRST} val images (the first {FIRST} of 320 train, {FIRST} of 80 val images in shard " in (
        first_line
    )
    assert f"note: val of '{shards}' is a stream: reading its first {FIRST} of 80 images (--max-images)." in output
    assert json.loads((tmp_path / "out" / "config.json").read_text())["max_images"] == FIRST
    _, whole = probe(shards, tmp_path / "whole", "--max-images", 1000, "--probe", "knn")
    assert whole["images"] == {"train": 320, "val": 80, "of": {"train": 320, "val": 80}}


def test_knn_on_the_first_images_of_shards_equals_knn_on_a_folder_of_those_images(shards, tmp_path):
    """The probe sees exactly the first --max-images of each split, labelled by the manifest's class names."""
    classes = json.loads((shards / "manifest.json").read_text())["classes"]
    folder = tmp_path / "folder"
    for split in ("train", "val"):
        samples = first_samples(shards, split, FIRST)
        assert len({label for _, _, label in samples}) == 10  # every class folder has images in both splits
        for key, png, label in samples:
            (folder / split / classes[label]).mkdir(parents=True, exist_ok=True)
            (folder / split / classes[label] / f"{key}.png").write_bytes(png)
    knn = ["--probe", "knn", "--probe", "knn-std", "--knn-k", 5, "--knn-k", 20]
    _, streamed = probe(shards, tmp_path / "streamed", "--max-images", FIRST, *knn)
    _, read = probe(folder, tmp_path / "read", *knn)
    assert read["images"] == {"train": FIRST, "val": FIRST, "of": {"train": FIRST, "val": FIRST}}
    for name in ("knn", "knn-std"):
        assert streamed[name] == read[name]


def test_shards_without_class_names_are_numbered_over_both_splits(shards, tmp_path):
    """Shards with no manifest (another tool's) have no class names: labels are numbered up to the largest in either
    split's head, so a class missing from the training head still has its place (the probes' one-hot votes need
    it)."""
    bare = shutil.copytree(shards, tmp_path / "bare")
    (bare / "manifest.json").unlink()
    train, val = labelled_splits(str(bare / "train-{000000..000003}.tar"), 32, max_images=20)
    labels = labels_of(train) + labels_of(val)
    assert len(set(labels_of(train))) == 9  # the first 20 training images miss a class
    assert class_names(train) == class_names(val) == [str(i) for i in range(max(labels) + 1)]
    assert len(class_names(train)) == 10


def test_labelled_data_needs_a_val_split_and_more_than_one_class(tmp_path):
    copy_sample_images(tmp_path / "classes", 4)
    write_shards(tmp_path / "classes", tmp_path / "no-val")  # class folders without train/ and val/: all train
    with pytest.raises(DataError, match="hold no val split; accuracy is measured on val"):
        labelled_splits(str(tmp_path / "no-val"), 32)
    one_class = labelled_shards(tmp_path / "one-class", {"train": [0] * 4, "val": [0] * 4})
    with pytest.raises(DataError, match="all have one label; labels need a .cls member"):
        labelled_splits(str(one_class), 32)


def labelled_shards(folder, labels: dict, classes: list | None = None):
    """One shard per split whose samples carry `labels` (None: no .cls member), with a manifest naming `classes`."""
    folder.mkdir(parents=True)
    png = sample_png()
    for split, split_labels in labels.items():
        with wds.TarWriter(str(folder / f"{split}-000000.tar")) as writer:
            for n, label in enumerate(split_labels):
                writer.write({"__key__": f"{n:08d}", "png": png} | ({} if label is None else {"cls": label}))
    splits = {split: {"shards": [f"{split}-000000.tar"], "counts": [len(ls)]} for split, ls in labels.items()}
    manifest = {"format": "pretexts-shards/1", "classes": classes, "splits": splits}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


GOOD = [0, 1] * 4


@pytest.mark.parametrize(
    "train, expected",
    [
        ([0, 1, 999, 0, 1, 0, 1, 0], "sample 00000002 of shard 'train-000000.tar' has the label 999, not one of the 2"),
        ([0, 1, 0, -1, 1, 0, 1, 0], "sample 00000003 of shard 'train-000000.tar' has the label -1, not one of the 2"),
        ([0, 1, None] * 3, "sample 00000002 of shard 'train-000000.tar' has no label, and probing and fine-tuning"),
    ],
)
def test_a_label_outside_the_classes_or_missing_is_refused_by_probe_and_finetune(tmp_path, train, expected):
    """Invented or out-of-range labels would corrupt every score (or crash the loss): one line naming the sample."""
    data = labelled_shards(tmp_path / "shards", {"train": train, "val": GOOD}, classes=["a", "b"])
    fails_cleanly([*PROBE, "--data", data, "--out", tmp_path / "probe", "--probe", "knn"], expected)
    finetune = ["finetune", "--from-scratch", "--backbone", "test_convnext", "--workers", "0", "--epochs", "1"]
    fails_cleanly([*finetune, "--batch-size", "4", "--data", data, "--out", tmp_path / "finetune"], expected)


def test_pretraining_reads_unlabelled_shards(tmp_path):
    """Labels are the probes' and the fine-tune's: a pretraining run needs none."""
    data = labelled_shards(tmp_path / "shards", {"train": [None] * 16, "val": [None] * 4})
    args = ["train", "--data", data, "--backbone", "test_convnext", "--epochs", "1", "--batch-size", "8"]
    args += ["--workers", "0", "--eval-images", "4", "--figure-images", "2", "--monitor-every", "0"]
    result, error = run_cli([*args, "--out", tmp_path / "run"])
    assert result.exit_code == 0, error or result.output
    assert json.loads((tmp_path / "run" / "results.json").read_text())["optimizer_steps"] == 2


def sample_png() -> bytes:
    from pretexts.engine.data.datasets import SAMPLE_DIR

    return sorted(SAMPLE_DIR.glob("train/*/*.png"))[0].read_bytes()


def test_segment_refuses_shards_in_one_line_before_writing_anything(shards, tmp_path):
    args = ["segment", "--data", shards, "--from-scratch", "--backbone", "test_convnext", "--out", tmp_path / "out"]
    fails_cleanly(args, f"'{shards}' names shards, which hold no masks: segmentation reads image + mask folders")
    assert not (tmp_path / "out").exists()


def test_a_tiny_comparison_on_shards_completes_and_records_what_the_probes_read(shards, tmp_path):
    base = ["compare", "--backbone", "test_convnext", "--batch-size", "8", "--budget", "0.01", "--threads", "1"]
    args = [*base, "--data", shards, "--max-images", 32, "--out", tmp_path / "out"]
    result, error = run_cli(args)
    assert result.exit_code == 0, error or result.output
    assert "the probes read 32 train, 32 val images (the first 32 of 320 train, 32 of 80 val" in " ".join(
        result.output.split()
    )
    record = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert record["images"] == {"train": 32, "val": 32, "of": {"train": 320, "val": 80}}
    assert record["val_images"] == 32 and record["config"]["max_images"] == 32
    assert len(record["cells"]) == 2
    for cell in record["cells"].values():
        assert cell["settings"]["max_images"] == 32
        assert all(point["val_images"] == 32 for point in cell["points"].values())
    # cells measured on other images are not reused as if they were these
    fails_cleanly(
        [*base, "--data", shards, "--max-images", 16, "--out", tmp_path / "out"],
        "(--max-images 32, asked 16)",
        "rerun with --max-images 32",
    )
