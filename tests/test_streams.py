"""Streaming shards (issue 40): which specs are shard sets and their counts; every sample exactly once per epoch over
2 gloo ranks x 2 loader workers; equal lengths per rank over uneven shards; exact mid-epoch resume for any number of
workers; too few shards refused; first_images fixed; an unreadable image substituted."""

import io
import json
import re
import tarfile

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from PIL import Image
from stream_shards import (
    VAL_LABELS,
    AugmentedItem,
    LabelItem,
    epoch_labels,
    free_port,
    labels_by_rank,
    png_of,
    read_epoch,
    write_manifest,
    write_parquet,
    write_parquet_set,
    write_shard_set,
    write_tars,
)

from pretexts.engine.data.datasets import SAMPLE_DIR
from pretexts.engine.data.streams import ImageStream, first_images, is_stream, stream_shards
from pretexts.errors import DataError, ParameterError


def counts_of(spec, split: str):
    shards = stream_shards(str(spec), split)
    return None if shards is None else (shards.kind, shards.counts)


def test_specs_are_found_and_counted(tmp_path):
    manifest = write_shard_set(tmp_path / "manifest", [4, 4, 3], [2, 2])
    assert is_stream(str(manifest)) and counts_of(manifest, "train") == ("wds", [4, 4, 3])
    assert stream_shards(str(manifest), "train").classes == ["airplane", "automobile"]
    assert counts_of(manifest, "val") == ("wds", [2, 2]) and len(stream_shards(str(manifest), "val")) == 4

    tars = write_shard_set(tmp_path / "tars", [3, 5], [2], manifest=False)  # counted from the tar headers
    assert (
        is_stream(str(tars)) and counts_of(tars, "train") == ("wds", [3, 5]) and counts_of(tars, "val") == ("wds", [2])
    )
    assert stream_shards(str(tars), "train").classes is None
    pattern = tars / "train-{000000..000001}.tar"
    assert is_stream(str(pattern)) and counts_of(pattern, "train") == ("wds", [3, 5])
    assert counts_of(pattern, "val") == ("wds", [2])  # the val counterpart, over the val shards that exist
    assert counts_of(tars / "train-000001.tar", "train") == ("wds", [5])
    assert counts_of(tars / "train-{000000..000000}.tar", "train") == ("wds", [3])

    unsplit = tmp_path / "unsplit"  # no split prefix: every shard is train
    write_tars(unsplit, [2, 3], split="shard")
    assert counts_of(unsplit, "train") == ("wds", [2, 3]) and counts_of(unsplit, "val") is None

    flat = tmp_path / "flat"
    write_parquet_set(flat, [3, 4]), write_parquet_set(flat, [2], "validation")
    assert is_stream(str(flat)) and counts_of(flat, "train") == ("parquet", [3, 4]) and counts_of(flat, "val")[1] == [2]
    hub = tmp_path / "hub"
    write_parquet_set(hub / "data", [5]), write_parquet_set(hub / "data", [1, 1], "test")
    assert is_stream(str(hub)) and counts_of(hub, "train") == ("parquet", [5]) and counts_of(hub, "val")[1] == [1, 1]
    folders = tmp_path / "folders"
    write_parquet_set(folders / "train", [2, 2]), write_parquet_set(folders / "val", [3])
    assert is_stream(str(folders)) and counts_of(folders, "train") == ("parquet", [2, 2])
    assert counts_of(folders, "val") == ("parquet", [3])
    assert stream_shards(str(folders), "train").label_column == "label"
    nameless = tmp_path / "nameless"
    write_parquet(nameless / "images.parquet", range(6))
    assert counts_of(nameless, "train") == ("parquet", [6]) and counts_of(nameless, "val") is None

    assert not is_stream(str(SAMPLE_DIR)) and not is_stream(str(tmp_path / "missing"))


def naming(path, rest: str) -> str:
    """A pattern for a message that quotes `path`, then says `rest` (a regex)."""
    return re.escape(f"'{path}'") + rest


def test_bad_specs_name_their_path(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    tarfile.open(empty / "train-000000.tar", "w").close()  # a valid tar of no samples
    with pytest.raises(DataError, match=naming(empty / "train-000000.tar", r" holds no samples")):
        stream_shards(str(empty), "train")
    corrupt = write_shard_set(tmp_path / "corrupt", [3, 3], manifest=False)
    (corrupt / "train-000001.tar").write_bytes(b"x" * 4096)
    with pytest.raises(DataError, match=naming(corrupt / "train-000001.tar", r" is not a readable tar")):
        stream_shards(str(corrupt), "train")
    truncated = write_shard_set(tmp_path / "truncated", [3, 3], manifest=False)
    data = (truncated / "train-000000.tar").read_bytes()
    (truncated / "train-000000.tar").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=naming(truncated / "train-000000.tar", r" is truncated")):
        stream_shards(str(truncated), "train")
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "notes.txt").write_text("no shards")
    with pytest.raises(DataError, match=naming(unknown, r" holds no manifest.json, .tar or .parquet")):
        stream_shards(str(unknown), "train")
    with pytest.raises(DataError, match=r"train-000002.tar' of .* does not exist \(1 of 3"):
        stream_shards(str(corrupt / "train-{000000..000002}.tar"), "train")
    manifest = write_shard_set(tmp_path / "lost", [2, 2])
    (manifest / "train-000001.tar").unlink()
    with pytest.raises(DataError, match=naming(manifest / "train-000001.tar", r" listed in manifest.json is missing")):
        stream_shards(str(manifest), "train")
    mixed = write_shard_set(tmp_path / "mixed", [2], manifest=False)
    write_tars(mixed, [2], split="extra")
    with pytest.raises(DataError, match=naming(mixed, r" mixes files named by split .* 'extra-000000.tar'")):
        stream_shards(str(mixed), "train")
    overstated = write_shard_set(tmp_path / "overstated", [2, 2])
    write_manifest(overstated, {"train": (["train-000000.tar", "train-000001.tar"], [2, 5])})
    stream = ImageStream(stream_shards(str(overstated), "train"), LabelItem(), shuffle=False)
    with pytest.raises(DataError, match="shard train-000001.tar holds 2 samples, fewer than its stated 5"):
        epoch_labels(stream, 0, 0)  # read to the end: the ranks would otherwise take different numbers of steps


def test_two_gloo_ranks_by_two_workers_read_every_sample_once(tmp_path):
    batch = 3
    write_parquet_set(tmp_path / "hf", [6] * 4)  # one file per reader
    sets = {
        "wds": stream_shards(str(write_shard_set(tmp_path / "wds", [6] * 8)), "train"),  # two shards per reader
        "parquet": stream_shards(str(tmp_path / "hf"), "train"),
    }
    out = tmp_path / "labels.json"
    # forked: real processes with their own gloo rank, without importing torch again
    mp.start_processes(labels_by_rank, (2, free_port(), sets, str(out), batch), nprocs=2, start_method="fork")
    gathered = json.loads(out.read_text())
    for name, shards in sets.items():
        ranks = gathered[name]
        for epoch in (0, 1):
            read = [label for rank in ranks for label in rank[epoch]]
            assert sorted(read) == list(range(len(shards))), f"{name} epoch {epoch}: not every sample exactly once"
            assert len(ranks[0][epoch]) == len(ranks[1][epoch]) == len(shards) // 2
        assert ranks[0][0] != ranks[0][1], f"{name}: epochs 0 and 1 read in the same order"
        # the same seed in another process, with other loader workers: the same order
        again = ImageStream(shards, LabelItem(), seed=3, rank=1, world=2, workers=2, batch_size=batch, buffer=5)
        assert epoch_labels(again, 1, 2) == ranks[1][1]
        other_seed = ImageStream(shards, LabelItem(), seed=4, rank=1, world=2, workers=2, batch_size=batch, buffer=5)
        assert epoch_labels(other_seed, 1, 2) != ranks[1][1]


@pytest.mark.parametrize("shuffle", [True, False])
def test_uneven_shards_give_every_rank_the_same_length(tmp_path, shuffle):
    counts = [5, 8, 6, 7, 5, 9, 6, 8, 7, 5]
    shards = stream_shards(str(write_shard_set(tmp_path, counts)), "train")
    streams = [
        ImageStream(shards, LabelItem(), seed=1, rank=r, world=2, workers=2, batch_size=2, shuffle=shuffle, buffer=4)
        for r in range(2)
    ]
    assert streams[0].epoch_length() == streams[1].epoch_length() > 0
    for epoch in range(3):
        read = [epoch_labels(stream, epoch, 2) for stream in streams]
        assert len(read[0]) == len(read[1]) == streams[0].epoch_length()
        every = read[0] + read[1]
        assert len(set(every)) == len(every) and set(every) <= set(range(sum(counts)))


@pytest.mark.parametrize("kind", ["wds", "parquet"])
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_the_tail_of_the_full_epoch(tmp_path, kind, workers):
    if kind == "wds":
        shards = stream_shards(str(write_shard_set(tmp_path, [12, 14, 13, 12])), "train")
    else:
        write_parquet_set(tmp_path, [12, 14, 13, 12])
        shards = stream_shards(str(tmp_path), "train")
    batch = 3

    def stream():
        return ImageStream(
            shards, AugmentedItem(), seed=5, rank=1, world=2, workers=workers, batch_size=batch, buffer=4
        )

    full = read_epoch(stream(), 1, workers)
    labels = torch.cat([labels for _, labels in full]).tolist()
    images = torch.cat([images for images, _ in full])
    assert len(labels) == stream().epoch_length() == 24  # 4 batches per worker: the round robin is exercised
    for done in (1, 2, 3, 5, len(full) - 1, len(full)):
        tail = read_epoch(stream(), 1, workers, start=done * batch)
        assert sum(len(labels) for _, labels in tail) == len(labels) - done * batch
        if tail:
            assert torch.cat([labels for _, labels in tail]).tolist() == labels[done * batch :]
            assert torch.equal(torch.cat([images for images, _ in tail]), images[done * batch :])
    # an image's crop hangs on the image, not on its position: the same with or without loader workers
    single = ImageStream(shards, AugmentedItem(), seed=5, rank=0, world=1, workers=0, batch_size=1)
    crops = {
        int(label): image for images_, labels_ in read_epoch(single, 1, 0) for image, label in zip(images_, labels_)
    }
    assert all(torch.equal(crops[label], image) for label, image in zip(labels, images))


def test_too_few_shards_or_other_workers_are_refused(tmp_path):
    shards = stream_shards(str(write_shard_set(tmp_path, [4, 4, 4])), "train")
    with pytest.raises(
        DataError, match=r"3 shards cannot feed 2 ranks x 2 loader workers \(4 readers\): write at least 4"
    ):
        ImageStream(shards, LabelItem(), world=2, workers=2)
    with pytest.raises(DataError, match=r"fewer samples than a batch of 16"):
        ImageStream(shards, LabelItem(), world=1, workers=3, batch_size=16)
    stream = ImageStream(shards, LabelItem(), workers=3, batch_size=2)
    with pytest.raises(ParameterError, match="built for 3 loader workers but a DataLoader with 1"):
        epoch_labels(stream, 0, 0)
    with pytest.raises(ParameterError, match="multiple of the batch size 2"):
        stream.set_position(0, 3)


def test_first_images_are_the_first_in_order(tmp_path):
    tars = stream_shards(str(write_shard_set(tmp_path / "wds", [3, 3, 3], [2])), "train")
    write_parquet_set(tmp_path / "hf", [4, 4])
    parquet = stream_shards(str(tmp_path / "hf"), "train")
    for shards in (tars, parquet):
        first = first_images(shards, 5)
        assert [label for _, label in first] == [0, 1, 2, 3, 4]
        expected = [np.asarray(Image.open(io.BytesIO(png_of(label))).convert("RGB")) for label in range(5)]
        assert all(np.array_equal(np.asarray(image), array) for (image, _), array in zip(first, expected))
        again = first_images(shards, 5)
        assert all(np.array_equal(np.asarray(a), np.asarray(b)) for (a, _), (b, _) in zip(first, again))
        assert [label for _, label in first_images(shards, 100)] == list(range(len(shards)))
    val = stream_shards(str(tmp_path / "wds"), "val")
    assert [label for _, label in first_images(val, 2)] == [VAL_LABELS, VAL_LABELS + 1]


def test_an_unreadable_image_is_replaced_by_the_next(tmp_path, capsys):
    folder = tmp_path / "bad"
    write_tars(folder, [4, 4], bad=(2,))
    shards = stream_shards(str(folder), "train")
    assert [label for _, label in first_images(shards, 4)] == [0, 1, 3, 3]
    first_images(shards, 4)
    assert capsys.readouterr().err.count("image 00000002 of shard 'train-000000.tar' cannot be read") == 1
    stream = ImageStream(shards, LabelItem(), workers=0, batch_size=2, shuffle=False)
    assert epoch_labels(stream, 0, 0) == [0, 1, 3, 3, 4, 5, 6, 7]


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda m: m["splits"]["train"]["counts"].__setitem__(0, "many"), "has a count 'many'"),
        (lambda m: m["splits"].__setitem__("train", [["a.tar"], [4]]), "must be a mapping with 'shards' and 'counts'"),
        (lambda m: m["splits"]["train"]["counts"].__setitem__(0, -3), "has a count -3"),
        (lambda m: m["splits"]["train"].__setitem__("shards", "train-0.tar"), "must list its shards as file names"),
        (lambda m: m.__setitem__("classes", "airplane"), "classes must be a list of names"),
    ],
)
def test_a_malformed_manifest_is_one_error_line_naming_the_field(tmp_path, change, expected):
    """Each manifest field is checked where it is read: one `Error:` line, exit 2, never a traceback."""
    from cli_runs import fails_cleanly

    folder = write_shard_set(tmp_path / "shards", [4, 4], [2])
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    args = ["train", "--data", str(folder), "--backbone", "test_convnext", "--epochs", "1", "--batch-size", "4"]
    args += ["--max-steps-per-epoch", "1", "--workers", "0", "--eval-images", "2", "--monitor-every", "0"]
    fails_cleanly([*args, "--out", str(tmp_path / "run")], "manifest.json", expected, "pretexts shard")
