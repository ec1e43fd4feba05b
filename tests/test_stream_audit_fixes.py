"""Shards and `compare` as a user meets them: a brace pattern of a `pretexts shard` folder names its classes, a
stopped pack is said to be incomplete, a short shard is the one named, `hfds/` never reaches the network, and
`compare` refuses data and settings it cannot use before its plan."""

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_runs import fails_cleanly, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from stream_shards import LabelItem, epoch_labels, write_manifest, write_shard_set

from pretexts.engine.data import datasets as datasets_module
from pretexts.engine.data import shard_writer
from pretexts.engine.data.shard_sets import stream_shards
from pretexts.engine.data.shard_writer import write_shards
from pretexts.engine.data.streams import ImageStream
from pretexts.errors import DataError

TRAIN_PATTERN = "train-{000000..000000}.tar"


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("packed") / "shards"
    write_shards("sample", out, shard_size=50)
    return out


def compare_args(data, out, *more) -> list:
    return [
        *("compare", "--backbone", "test_convnext", "--batch-size", "8", "--threads", "1", "--workers", "0"),
        *("--tasks", "random-mask", "--methods", "energy", "--seeds", "0", "--steps", "2", "--device", "cpu"),
        *("--data", data, "--out", out, *more),
    ]


def test_a_brace_pattern_of_a_shard_folder_finetunes_with_its_classes(packed, tmp_path):
    classes = json.loads((packed / "manifest.json").read_text())["classes"]
    for split in ("train", "val"):
        assert stream_shards(str(packed / TRAIN_PATTERN), split).classes == classes
    args = ["finetune", "--from-scratch", "--backbone", "test_convnext", "--workers", "0", "--epochs", "1"]
    result, error = run_cli([*args, "--batch-size", "16", "--data", packed / TRAIN_PATTERN, "--out", tmp_path / "ft"])
    assert result.exit_code == 0, error or result.output


def test_compare_refuses_shards_without_classes_before_its_plan(packed, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for tar in packed.glob("*.tar"):
        shutil.copy(tar, bare / tar.name.replace("-", "_"))  # another tool's names: read without a warning
    result, error = run_cli(compare_args(bare, tmp_path / "cmp", "--finetune-epochs", "1"))
    assert result.exit_code == 2 and "name no classes" in error, result.output
    assert "plan:" not in result.output and not (tmp_path / "cmp").exists()


def test_compare_refuses_a_stopped_cell_of_another_batch_size_before_its_plan(packed, tmp_path):
    run = tmp_path / "cmp" / "cells" / "test_convnext" / "energy__random-mask" / "seed0" / "run"
    run.mkdir(parents=True)
    saved = {"backbone": "test_convnext", "data": str(packed), "img_size": 32, "batch_size": 16, "workers": 0}
    (run / "config.json").write_text(json.dumps(saved))
    (run / "checkpoint.pt").write_bytes(b"")  # read only when config.json is missing
    (run / "budget.json").write_text("{}")
    result, error = run_cli(compare_args(packed, tmp_path / "cmp"))
    assert result.exit_code == 2 and "plan:" not in result.output, result.output
    assert "stopped mid-pretraining" in error and "--batch-size 16, asked 8" in error, error
    assert "rerun with --batch-size 16" in error and "--force" in error and "resuming" not in error, error


def test_compare_passes_a_stopped_cell_whose_data_train_recorded_absolute(packed, tmp_path, monkeypatch):
    run = tmp_path / "cmp" / "cells" / "test_convnext" / "energy__random-mask" / "seed0" / "run"
    run.mkdir(parents=True)
    saved = {"backbone": "test_convnext", "data": str(packed), "img_size": 32, "batch_size": 8, "workers": 0}
    (run / "config.json").write_text(json.dumps(saved))  # train records --data absolute; compare was given it relative
    (run / "checkpoint.pt").write_bytes(b"")
    (run / "budget.json").write_text("{}")
    monkeypatch.chdir(packed.parent)
    result, error = run_cli(compare_args(packed.name, tmp_path / "cmp"))
    assert "stopped mid-pretraining" not in error, error


def test_an_interrupted_pack_says_out_is_incomplete_and_reading_it_warns(tmp_path, monkeypatch, capsys):
    pack_split = shard_writer.pack_split

    def stopped(out, split, *args):
        pack_split(out, split, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(shard_writer, "pack_split", stopped)
    out = tmp_path / "part"
    result, _ = run_cli(["shard", "sample", out, "--shard-size", "50"])
    assert result.exit_code == 130, result.output
    assert "incomplete shard set" in result.output and "--force" in result.output, result.output
    assert not (out / "manifest.json").exists() and any(out.glob("train-*.tar"))
    capsys.readouterr()
    stream_shards(str(out), "train")
    stream_shards(str(out), "val")
    warned = capsys.readouterr().err
    assert warned.count("warning:") == 1 and "may be incomplete" in warned and "--force" in warned, warned


def test_a_short_shard_is_the_one_named(tmp_path):
    folder = write_shard_set(tmp_path / "short", [2, 2, 2])
    write_manifest(folder, {"train": (["train-000000.tar", "train-000001.tar", "train-000002.tar"], [2, 5, 2])})
    stream = ImageStream(stream_shards(str(folder), "train"), LabelItem(), shuffle=False)
    with pytest.raises(DataError) as err:
        epoch_labels(stream, 0, 0)
    assert "train-000001.tar holds 2 samples, fewer than its stated 5" in str(err.value)
    assert "train-000000.tar" not in str(err.value) and "train-000002.tar" not in str(err.value)


def test_hfds_reads_offline_and_fails_in_one_line(tmp_path, monkeypatch):
    seen = {}

    def offline_only(name, **kwargs):
        seen.update({name: os.environ.get(name) for name in datasets_module.OFFLINE_VARIABLES})
        raise ConnectionError("Couldn't reach 'x/y' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("timm.data.create_dataset", offline_only)
    with pytest.raises(DataError, match="cannot be read from .*nothing is downloaded"):
        datasets_module.timm_dataset("hfds/x/y", str(tmp_path), "train")
    assert seen == {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"} and "HF_HUB_OFFLINE" not in os.environ
    monkeypatch.undo()
    with pytest.raises(DataError, match="hfds/uoft-cs/cifar10' cannot be read"):  # the real reader, offline
        datasets_module.timm_dataset("hfds/uoft-cs/cifar10", str(tmp_path), "train")


def test_shard_names_without_manifest_from_other_tools_do_not_warn(tmp_path, capsys):
    folder = write_shard_set(tmp_path / "other", [2], manifest=False)
    (folder / "train-000000.tar").rename(folder / "shard-0.tar")
    stream_shards(str(folder), "train")
    assert "warning" not in capsys.readouterr().err
