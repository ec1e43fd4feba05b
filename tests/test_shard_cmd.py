"""`pretexts shard`: an image folder packed into WebDataset shards and a manifest, each image's own bytes once, with
its label; unreadable images skipped and listed; a non-empty OUT refused without --force."""

import hashlib
import io
import json
import shutil
import tarfile
from collections import Counter
from pathlib import Path

import pytest
from cli_runs import copy_sample_images, fails_cleanly, run_cli
from PIL import Image

from pretexts.engine.data.datasets import SAMPLE_DIR

CLASSES = sorted(p.name for p in (SAMPLE_DIR / "train").iterdir())


def read_shards(out: Path, split: str) -> list[dict]:
    """The split's samples in shard order, from its manifest's shards: {"key", "ext", "data", "cls"}."""
    manifest = json.loads((out / "manifest.json").read_text())
    samples = []
    for name in manifest["splits"][split]["shards"]:
        members: dict[str, dict] = {}
        with tarfile.open(out / name) as tar:
            for member in tar.getmembers():
                key, _, ext = member.name.partition(".")
                members.setdefault(key, {"key": key})[ext] = tar.extractfile(member).read()
        samples += members.values()
    for sample in samples:
        (ext,) = [e for e in sample if e not in ("key", "cls", "path.txt")]  # one image member per sample
        sample["ext"], sample["data"] = ext, sample.pop(ext)
    return samples


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def shard(*args) -> str:
    result, error = run_cli(["shard", *args])
    assert result.exit_code == 0 and not error, result.output
    return result.output


def test_the_sample_packs_every_image_once_with_its_label(tmp_path):
    out = tmp_path / "shards"
    output = shard(SAMPLE_DIR, out, "--shard-size", "100")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "pretexts-shards/1" and manifest["classes"] == CLASSES
    assert manifest["source"] == str(SAMPLE_DIR.resolve())
    train, val = manifest["splits"]["train"], manifest["splits"]["val"]
    assert train["shards"] == [f"train-{i:06d}.tar" for i in range(4)] and train["counts"] == [100, 100, 100, 20]
    assert (train["images"], val["images"], val["counts"], val["shards"]) == (320, 80, [80], ["val-000000.tar"])
    assert train["skipped"] == val["skipped"] == []
    assert sorted(p.name for p in out.iterdir()) == sorted(["manifest.json", *train["shards"], *val["shards"]])

    for split, size in (("train", 320), ("val", 80)):
        files = sorted((SAMPLE_DIR / split).glob("*/*.png"))
        samples = read_shards(out, split)
        assert [s["key"] for s in samples] == [f"{n:08d}" for n in range(size)]  # the running index in the split
        assert Counter(digest(s["data"]) for s in samples) == Counter(digest(p.read_bytes()) for p in files)
        label_of = {digest(p.read_bytes()): CLASSES.index(p.parent.name) for p in files}
        assert all(s["ext"] == "png" and int(s["cls"].decode("ascii")) == label_of[digest(s["data"])] for s in samples)
        # shuffled: the folder's class-sorted order is broken up, so the first shard holds every class
        assert len({s["cls"] for s in samples[:100]}) == 10 and [s["data"] for s in samples] != [
            p.read_bytes() for p in files
        ]

    assert (
        "wrote 400 images in 5 shards" in output and "train 320 images in 4, val 80 images in 1; 10 classes" in output
    )
    assert "skipped 0 images" in output and output.splitlines()[-1] == f"next: pretexts train --data {out}"


def test_the_order_is_seeded_and_no_shuffle_keeps_the_folders(tmp_path):
    source = copy_sample_images(tmp_path / "src", 6, classes=("a", "b", "c"))
    shard(source, tmp_path / "one", "--seed", "3")
    shard(source, tmp_path / "two", "--seed", "3")
    shard(source, tmp_path / "other", "--seed", "4")
    shard(source, tmp_path / "kept", "--no-shuffle")
    tar = "train-000000.tar"
    assert (tmp_path / "one" / tar).read_bytes() == (tmp_path / "two" / tar).read_bytes()  # same input, same file
    seeded = [s["data"] for s in read_shards(tmp_path / "one", "train")]
    assert seeded != [s["data"] for s in read_shards(tmp_path / "other", "train")]
    in_folder = [p.read_bytes() for p in sorted(source.glob("*/*.png"))]
    assert [s["data"] for s in read_shards(tmp_path / "kept", "train")] == in_folder != seeded


def test_unreadable_images_are_skipped_and_listed(tmp_path):
    source = copy_sample_images(tmp_path / "src", 4)
    (source / "a" / "broken.png").write_bytes(b"not a png at all")
    (source / "b" / "empty.jpg").write_bytes(b"")
    out = tmp_path / "shards"
    output = shard(source, out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["splits"]) == ["train"] and manifest["classes"] == ["a", "b"]
    train = manifest["splits"]["train"]
    assert (train["images"], train["counts"]) == (8, [8])
    assert train["skipped"] == [
        f"{source / 'a' / 'broken.png'}: cannot identify image file (not an image?)",
        f"{source / 'b' / 'empty.jpg'}: empty file (0 bytes)",
    ]
    samples = read_shards(out, "train")
    assert len(samples) == 8 and all(len(s["data"]) > 100 for s in samples)
    assert Counter(s["cls"] for s in samples) == {b"0": 4, b"1": 4}
    skipped = [line for line in output.splitlines() if line.startswith("skipped")]
    assert skipped == [
        "skipped 2 unreadable images (listed in manifest.json): broken.png: cannot identify image file "
        "(not an image?); empty.jpg: empty file (0 bytes)."
    ]
    assert "no train/ and val/ folders: every image went to train" in output


def test_a_flat_folder_packs_unlabelled_images_in_their_own_format(tmp_path):
    source = tmp_path / "flat"
    source.mkdir()
    for path in sorted((SAMPLE_DIR / "val").glob("*/*.png"))[:5]:
        shutil.copy(path, source / path.name)
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 10, 10)).save(buffer, "JPEG")
    (source / "photo.JPEG").write_bytes(buffer.getvalue())
    out = tmp_path / "shards"
    output = shard(source, out, "--shard-size", "4", "--no-shuffle")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["classes"] is None and manifest["splits"]["train"]["counts"] == [4, 2]
    samples = read_shards(out, "train")
    assert all("cls" not in s for s in samples)
    assert [s["ext"] for s in samples] == ["jpg", "png", "png", "png", "png", "png"]  # 'photo.JPEG' sorts first
    assert samples[0]["data"] == buffer.getvalue()  # the file's bytes, not re-encoded
    assert "unlabelled" in output


def test_val_labels_are_trains_indices_of_the_same_class_names(tmp_path):
    source = tmp_path / "src"
    copy_sample_images(source / "train", 2, classes=("a", "b", "c"))
    copy_sample_images(source / "val", 1, classes=("c",), split="val")
    shard(source, tmp_path / "shards")
    assert [s["cls"] for s in read_shards(tmp_path / "shards", "val")] == [b"2"]
    copy_sample_images(source / "val", 1, classes=("d",), split="val")
    fails_cleanly(["shard", source, tmp_path / "other"], "only in val/: d", "Labels are matched by class folder name")
    assert not (tmp_path / "other").exists(), "a source refused leaves no OUT behind"


def test_class_names_match_whatever_their_unicode_normalisation(tmp_path):
    # macOS writes folder names decomposed (NFD), Linux and Windows composed (NFC): to a user they are one name
    source = tmp_path / "src"
    copy_sample_images(source / "train", 2, classes=("Affe", "K\u00e4fer"))
    copy_sample_images(source / "val", 1, classes=("Ka\u0308fer",), split="val")
    shard(source, tmp_path / "shards")
    assert [s["cls"] for s in read_shards(tmp_path / "shards", "val")] == [b"1"]


def test_a_non_empty_out_is_refused_without_force(tmp_path):
    out = tmp_path / "shards"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    fails_cleanly(["shard", SAMPLE_DIR, out], f"output folder '{out}' is not empty", "--force")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]

    shard(SAMPLE_DIR, out, "--force", "--shard-size", "50")
    assert len(list(out.glob("train-*.tar"))) == 7
    shard(SAMPLE_DIR, out, "--force")  # an earlier set's shards go; the user's own file stays
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "notes.txt", "train-000000.tar", "val-000000.tar"]
    assert len(read_shards(out, "train")) == 320

    fails_cleanly(["shard", SAMPLE_DIR, SAMPLE_DIR / "train" / "shards"], "lies inside the source")
    fails_cleanly(["shard", tmp_path / "missing", tmp_path / "new"], "does not exist")


@pytest.mark.parametrize("value", ["0", "-3", "1000001", "ten"])
def test_a_bad_shard_size_names_its_range(tmp_path, value):
    error = fails_cleanly(["shard", SAMPLE_DIR, tmp_path / "shards", "--shard-size", value], "--shard-size")
    assert "1<=x<=1000000" in error or "not a valid integer" in error, error
    assert not (tmp_path / "shards").exists()
