"""Streamed inputs that used to hang, crash or take minutes are one line (or a substituted image): a brace pattern
of millions of names, a truncated tar, a parquet whose data pages are corrupt behind an intact footer, an image
cell naming a FIFO; and a folder given where a checkpoint is expected says what it is."""

import os

import pytest
from stream_shards import png_of, write_parquet, write_tars

from pretexts.engine.data.streams import first_images, parquet_samples, stream_shards, tar_samples
from pretexts.engine.training.checkpoint import load_checkpoint
from pretexts.errors import CheckpointError, DataError


def test_a_brace_pattern_of_millions_of_names_is_refused_before_it_is_listed(tmp_path):
    with pytest.raises(DataError, match=r"names more than 1,000,000 shards; name the shards that exist"):
        stream_shards(str(tmp_path / "none-{0000000..9999999}.tar"), "train")


def test_a_truncated_tar_is_named_with_its_cause_alone(tmp_path):
    (name,) = write_tars(tmp_path, [8])
    shard = tmp_path / name
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2 + 100])
    with pytest.raises(DataError) as err:
        list(tar_samples(str(shard)))
    message = str(err.value)
    assert message.startswith(f"shard '{shard}' cannot be read (") and "BufferedReader" not in message
    assert "(unexpected end of data); write it again." in message


def test_a_parquet_with_corrupt_data_pages_is_one_error_naming_the_file(tmp_path):
    path = write_parquet(tmp_path / "c" / "train-00000-of-00001.parquet", list(range(40)))
    data = bytearray(path.read_bytes())
    for i in range(int(len(data) * 0.3), int(len(data) * 0.6)):  # the pages; the footer stays intact
        data[i] = (data[i] * 7 + 13) % 256
    path.write_bytes(bytes(data))
    shards = stream_shards(str(tmp_path / "c"), "train")
    assert shards.counts == [40]  # the footer still counts the rows
    with pytest.raises(DataError, match=rf"parquet file '{path}' cannot be read after row 0 \(.*\); write it again"):
        list(parquet_samples(shards.urls[0], shards.image_column, shards.label_column))


def test_an_image_cell_naming_a_fifo_is_substituted_not_read(tmp_path, capsys, monkeypatch):
    import datasets

    from pretexts.engine.data import streams

    monkeypatch.setattr(streams, "WARN", streams.WarnOnce())  # a sample is warned about once
    monkeypatch.chdir(tmp_path)  # datasets sizes each path cell relative to here when it writes
    os.mkfifo("fifo.png")
    (tmp_path / "ok.png").write_bytes(png_of(1))
    cells = [{"bytes": None, "path": "fifo.png"}, {"bytes": None, "path": "ok.png"}]
    table = datasets.Dataset.from_dict({"image": cells, "label": [0, 1]})
    table.cast_column("image", datasets.Image()).to_parquet(str(tmp_path / "train-00000-of-00001.parquet"))
    ((image, label),) = first_images(stream_shards(str(tmp_path), "train"), 1)
    assert label == 1 and image.size == (32, 32)
    assert "fifo.png' is not a regular file. Using the next image instead (it counts twice)." in capsys.readouterr().err


def test_a_folder_given_as_a_checkpoint_says_what_it_is(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    (export / "pretexts.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"is an export for timm \(load it with timm.create_model\), not a chec"):
        load_checkpoint(export)
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=rf"is a folder, not a checkpoint; .* Did you mean '{run}/checkpoint.pt'"):
        load_checkpoint(run)
