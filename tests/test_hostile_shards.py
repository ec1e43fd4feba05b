"""Shards that other tools (or a hostile source) write oddly: a tar holding members webdataset never yields (README,
LICENSE, ._x.png, metadata) is counted as webdataset reads it, so an epoch ends where it said; a parquet file whose
Hugging Face schema metadata is malformed is one DataError naming the file."""

import io
import json
import tarfile

import pytest
from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (autouse)
from stream_shards import png_of, write_parquet

from pretexts.engine.data.streams import parquet_samples, stream_shards
from pretexts.errors import DataError


def add(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_tar(path, keys: list[str]) -> None:
    """Samples `keys` (a PNG and a .cls each), with members webdataset skips among them."""
    with tarfile.open(path, "w") as tar:
        add(tar, "README")
        add(tar, "LICENSE", b"MIT")
        for index, key in enumerate(keys):
            add(tar, f"{key}.png", png_of(index))
            add(tar, f"{key}.cls", str(index % 2).encode())
            if index == 2:  # a macOS resource fork, a metadata folder and a dotfile between samples
                add(tar, "._0003.png", b"\x00\x05\x16\x07")
                add(tar, "__meta__/info.json", b"{}")
                add(tar, "__index__", b"0")
                add(tar, ".hidden", b"")
        add(tar, "NOTICE")


def webdataset_count(path) -> int:
    import webdataset as wds

    return sum(1 for _ in wds.DataPipeline(wds.SimpleShardList([str(path)]), wds.tarfile_to_samples()))


def test_a_tar_is_counted_as_webdataset_reads_it(tmp_path):
    write_tar(tmp_path / "a.tar", [f"{i:04d}" for i in range(6)])
    write_tar(tmp_path / "b.tar", ["x/0001", "x/0002", "y/0001", "x/0001"])  # a key met again after another
    shards = stream_shards(str(tmp_path), "train")
    assert shards.counts == [6, 4] == [webdataset_count(tmp_path / "a.tar"), webdataset_count(tmp_path / "b.tar")]


def test_an_epoch_of_tars_holding_readme_and_license_members_ends_as_stated(tmp_path):
    (tmp_path / "data").mkdir()
    for shard in range(2):
        write_tar(tmp_path / "data" / f"shard-{shard}.tar", [f"{shard}{i:03d}" for i in range(8)])
    args = [*TRAIN, "--data", tmp_path / "data", "--out", tmp_path / "run", "--epochs", "1", "--batch-size", "2"]
    result, error = run_cli([*args, "--workers", "0", "--eval-images", "2", "--figure-images", "2"])
    assert result.exit_code == 0 and not error, result.output[-2000:]
    assert "(16 train images" in result.output and "step 8/8" in result.output, result.output[-2000:]


def with_metadata(path, metadata: bytes):
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({b"huggingface": metadata}), path)
    return path


FEATURES = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": ["a", "b"]}}


def features(**changed) -> bytes:
    return json.dumps({"info": {"features": {**FEATURES, **changed}}}).encode()


# (the metadata, whether datasets itself fails on it, with a traceback)
MALFORMED = {
    "not JSON": (b"not json", True),
    "a list": (b'["a"]', False),
    "features as a list": (json.dumps({"info": {"features": ["x"]}}).encode(), True),
    "class names as a number": (features(label={"_type": "ClassLabel", "names": 5}), True),
    "class names as numbers": (features(label={"_type": "ClassLabel", "names": [1, 2]}), False),
    "an unknown feature type": (features(image={"_type": "Bogus"}), True),
    "nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, True),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_hugging_face_metadata_is_one_error_naming_the_file(tmp_path, name):
    metadata, datasets_fails = MALFORMED[name]
    good = write_parquet(tmp_path / "d" / "train-00000-of-00002.parquet", [0, 1])
    bad = with_metadata(write_parquet(tmp_path / "d" / "train-00001-of-00002.parquet", [2, 3]), metadata)
    with pytest.raises(DataError, match=f"parquet file '{bad}' has Hugging Face metadata .* that cannot be read"):
        stream_shards(str(tmp_path / "d"), "train")
    assert len(list(parquet_samples(str(good), "image", "label"))) == 2
    if datasets_fails:  # a file read without the start's check (changed since) is one line too
        with pytest.raises(DataError, match=f"parquet file '{bad}' cannot be read"):
            list(parquet_samples(str(bad), "image", "label"))
