"""Checkpoints are read as weights only: a payload never runs, an old format names its conversion, a flipped byte
and a checkpoint of the wrong kind or shape are one line each, for every command that reads one."""

import os
import shutil
import struct
import zipfile

import pytest
import torch
from cli_runs import TRAIN, fails_cleanly, one_torch_thread, run_cli, tiny_image_folder  # noqa: F401 (autouse)
from pretrained_checkpoints import finetune_argv

from pretexts.engine.training.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint

FAST = TRAIN + ["--epochs", "1", "--max-steps-per-epoch", "1", "--workers", "0"]


class Payload:
    """Unpickled by a full pickle load, it runs a shell command that creates `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A one-step pretraining run and a one-step fine-tuning run from it, on 32 tiny images."""
    root = tmp_path_factory.mktemp("runs")
    data = tiny_image_folder(root / "data")
    result, _ = run_cli(FAST + ["--data", data, "--out", root / "pre"])
    assert result.exit_code == 0, result.output
    result, _ = run_cli(finetune_argv(root / "pre" / "checkpoint.pt", root / "ft", "--data", str(data)))
    assert result.exit_code == 0, result.output
    return {
        "data": data,
        "pre": root / "pre" / "checkpoint.pt",
        "ft": root / "ft" / "checkpoint.pt",
        "finetuned": root / "ft" / "finetuned.pt",
    }


# Every command that reads a checkpoint, with the smallest arguments that reach the read; {ckpt} is the file.
READERS = {
    "train --resume": FAST + ["--epochs", "2", "--data", "{data}", "--out", "{out}", "--resume", "{ckpt}"],
    "finetune --checkpoint": [
        "finetune",
        "--checkpoint",
        "{ckpt}",
        "--data",
        "{data}",
        "--workers",
        "0",
        "--out",
        "{out}.png",
    ],
    "finetune --resume": [
        "finetune",
        "--from-scratch",
        "--backbone",
        "test_convnext",
        "--data",
        "{data}",
        "--batch-size",
        "8",
        "--workers",
        "0",
        "--out",
        "{out}",
        "--resume",
        "{ckpt}",
    ],
    "probe --checkpoint": ["probe", "--checkpoint", "{ckpt}", "--data", "{data}", "--workers", "0", "--out", "{out}"],
    "segment --checkpoint": [
        "segment",
        "--checkpoint",
        "{ckpt}",
        "--data",
        "{data}",
        "--workers",
        "0",
        "--out",
        "{out}.png",
    ],
    "export --checkpoint": ["export", "--checkpoint", "{ckpt}", "--out", "{out}"],
    "restore --checkpoint": ["restore", "--checkpoint", "{ckpt}", "--data", "{data}", "--out", "{out}.png"],
    "energy --checkpoint": [
        "energy",
        "--checkpoint",
        "{ckpt}",
        "--data",
        "{data}",
        "--workers",
        "0",
        "--out",
        "{out}.png",
    ],
}


def command(name: str, ckpt, runs, out) -> list[str]:
    return [str(a).format(ckpt=ckpt, data=runs["data"], out=out) for a in READERS[name]]


@pytest.mark.parametrize("name", list(READERS))
def test_a_payload_is_refused_before_it_runs(runs, tmp_path, name):
    marker = tmp_path / "marker"
    ckpt = {**load_checkpoint(runs["pre"]), "payload": Payload(marker)}
    torch.save(ckpt, tmp_path / "payload.pt")
    fails_cleanly(
        command(name, tmp_path / "payload.pt", runs, tmp_path / "out"),
        "holds Python objects that are not weights",
        "system",
        "refused without running",
    )
    assert not marker.exists(), f"{name} ran the payload"


def test_a_checkpoint_of_another_format_version_is_refused_in_one_line(runs, tmp_path):
    """No conversion of formats: a checkpoint whose format version is not this pretexts' is named and refused."""
    other = tmp_path / "other.pt"
    ckpt = {k: v for k, v in load_checkpoint(runs["pre"]).items() if k != "checksum"}
    torch.save({**ckpt, "format_version": FORMAT_VERSION - 1}, other)
    fails_cleanly(
        command("train --resume", other, runs, tmp_path / "r"),
        f"format version {FORMAT_VERSION - 1}",
        f"reads version {FORMAT_VERSION}",
    )


def flip_a_byte(src, dst) -> None:
    """Flip one bit inside the largest tensor's bytes (torch checks no CRC, so the file still unpickles)."""
    with zipfile.ZipFile(src) as archive:
        record = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(src.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[record.header_offset + 26 : record.header_offset + 30])
    data[record.header_offset + 30 + name_len + extra_len + record.file_size // 2] ^= 0x10
    dst.write_bytes(data)


@pytest.mark.parametrize("name", ["train --resume", "export --checkpoint"])
def test_a_flipped_byte_is_refused(runs, tmp_path, name):
    flip_a_byte(runs["pre"], tmp_path / "flipped.pt")
    fails_cleanly(
        command(name, tmp_path / "flipped.pt", runs, tmp_path / "out"),
        "is corrupted (checksum mismatch)",
        "restore it from a copy, or start its run over with --force",
    )


@pytest.mark.parametrize("name", ["train --resume", "restore --checkpoint", "energy --checkpoint"])
def test_a_fine_tuning_checkpoint_is_named_where_a_pretraining_one_belongs(runs, tmp_path, name):
    fails_cleanly(
        command(name, runs["ft"], runs, tmp_path / "out"),
        "is a fine-tuning checkpoint",
        "pretexts finetune --resume",
        "this command takes a checkpoint.pt of `pretexts train`",
    )


def test_export_refuses_a_segmenter_and_an_empty_config(runs, tmp_path):
    result, _ = run_cli(
        [
            "segment",
            "--checkpoint",
            runs["pre"],
            "--data",
            "generated",
            "--out",
            tmp_path / "seg",
            "--max-steps",
            "1",
            "--batch-size",
            "8",
            "--workers",
            "0",
        ]
    )
    assert result.exit_code == 0, result.output
    fails_cleanly(
        ["export", "--checkpoint", tmp_path / "seg" / "segmenter.pt", "--out", tmp_path / "e1"],
        "is a segmentation model",
        "pretexts segment --resume",
    )
    save_checkpoint({**load_checkpoint(runs["pre"]), "config": {}}, tmp_path / "empty.pt")
    fails_cleanly(
        ["export", "--checkpoint", tmp_path / "empty.pt", "--out", tmp_path / "e2"], "names no backbone in its config"
    )


def misshapen(path, dst, prefix: str = "") -> tuple[str, list, list]:
    """`path` with its first 4-d weight one output channel short, re-saved with a valid checksum."""
    ckpt = load_checkpoint(path)
    key = next(k for k, v in ckpt["model"].items() if k.startswith(prefix) and v.dim() == 4)
    good = ckpt["model"][key]
    ckpt["model"][key] = good[1:].clone()
    save_checkpoint(ckpt, dst)
    return key, list(good[1:].shape), list(good.shape)


@pytest.mark.parametrize(
    "name", ["train --resume", "finetune --checkpoint", "export --checkpoint", "restore --checkpoint"]
)
def test_a_misshapen_checkpoint_is_one_line_naming_the_key(runs, tmp_path, name):
    key, saved, model = misshapen(runs["pre"], tmp_path / "bad.pt", "backbone.")
    shown = key if name in ("train --resume", "restore --checkpoint") else key[len("backbone.") :]
    fails_cleanly(
        command(name, tmp_path / "bad.pt", runs, tmp_path / "out"),
        f"'{shown}' is {saved} in the checkpoint, {model} in the model",
    )


def test_a_misshapen_fine_tuned_classifier_is_one_line(runs, tmp_path):
    key, saved, model = misshapen(runs["finetuned"], tmp_path / "bad.pt")
    fails_cleanly(
        ["export", "--checkpoint", tmp_path / "bad.pt", "--out", tmp_path / "out"],
        f"'{key}' is {saved} in the checkpoint, {model} in the model",
    )


def test_finetune_resume_continues_from_its_own_checkpoint(runs, tmp_path):
    """The fine-tuning checkpoint (RNG states included) reads back under weights_only and resumes."""
    assert torch.load(runs["ft"], weights_only=True)["rng"]["numpy"]["key"].dtype == torch.int64  # no numpy inside
    shutil.copytree(runs["ft"].parent, tmp_path / "ft")
    args = finetune_argv(runs["pre"], tmp_path / "ft", "--data", str(runs["data"]), "--resume", epochs=2)
    result, _ = run_cli(args)
    assert result.exit_code == 0, result.output
    assert load_checkpoint(tmp_path / "ft" / "checkpoint.pt")["epoch"] == 2
