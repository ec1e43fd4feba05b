"""Pretraining on shards (WebDataset tars, Hugging Face parquet): the training split streams, a run stopped
mid-epoch resumes to bit-identical weights (with the loader workers it ran with), and what needs a whole split
reads its first images and says so."""

import json
import math
import os
import signal

import pytest
import torch
from cli_runs import run_cli
from stream_shards import VAL_LABELS, write_parquet_set, write_shard_set
from test_finetune import SMALL_DATA

from pretexts.engine import PretrainConfig, Pretrainer, load_checkpoint
from pretexts.engine.data.datasets import build_source
from pretexts.engine.data.streams import ImageStream
from pretexts.engine.evaluation.finetune import Finetuner
from pretexts.engine.evaluation.finetune_config import FinetuneConfig
from pretexts.errors import CheckpointError, DataError


def shards(kind: str, folder):
    """16 training shards of 8 images, and 16 val images, as tars with a manifest or as parquet files."""
    if kind == "wds":
        return write_shard_set(folder, train=[8] * 8, val=[16])
    write_parquet_set(folder, [8] * 8)
    write_parquet_set(folder, [16], split="validation", first=VAL_LABELS)
    return folder


def config(data, out, **kw) -> PretrainConfig:
    kw.setdefault("workers", 2)
    return PretrainConfig(
        backbone="test_convnext",
        data=str(data),
        epochs=2,
        batch_size=8,
        max_steps_per_epoch=3,
        out=str(out),
        eval_images=8,
        figure_images=2,
        seed=3,
        **kw,
    )


class TermAtStep4(Pretrainer):
    """SIGTERM after the 4th step: one step into the second epoch, loader workers running."""

    def train_step(self, images):
        stats = super().train_step(images)
        if self.global_step == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return stats


@pytest.mark.parametrize("kind", ["wds", "parquet"])
def test_a_stream_stopped_mid_epoch_resumes_to_the_same_weights_and_only_with_its_workers(tmp_path, kind):
    data = shards(kind, tmp_path / "shards")
    straight = Pretrainer(config(data, tmp_path / "straight"))
    assert isinstance(straight.train_set, ImageStream) and straight.steps_per_epoch == 3
    results = straight.run()
    assert results["optimizer_steps"] == 6 and results["held_out"]["images"] == 8
    stopped = TermAtStep4(config(data, tmp_path / "stopped")).run()
    assert stopped["interrupted"] == "SIGTERM"
    ckpt = load_checkpoint(tmp_path / "stopped" / "checkpoint.pt")
    assert (ckpt["epoch"], ckpt["batch"], ckpt["global_step"]) == (1, 1, 4)
    # shards are dealt to ranks x workers readers: other workers would read the resumed epoch in another order
    with pytest.raises(CheckpointError, match=r"trained with workers=2, this run asks for 1.*--workers"):
        Pretrainer(config(data, tmp_path / "stopped", resume="auto", workers=1)).run()
    Pretrainer(config(data, tmp_path / "stopped", resume="auto")).run()
    a, b = (load_checkpoint(tmp_path / run / "checkpoint.pt")["model"] for run in ("straight", "stopped"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    first = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["model"]
    assert any(
        not torch.equal(first[k], v)
        for k, v in Pretrainer(config(data, tmp_path / "fresh")).model.state_dict().items()
        if k in first
    )


def test_a_split_read_whole_is_its_first_images_and_says_so(tmp_path, capsys):
    data = shards("wds", tmp_path / "shards")
    head = build_source(str(data), "train", max_images=20)
    assert len(head) == 20 and head.targets == list(range(20))
    assert "reading its first 20 of 64 images (--max-images)" in capsys.readouterr().err
    whole = build_source(str(data), "val", max_images=100)
    assert len(whole) == 16 and whole.targets == list(range(VAL_LABELS, VAL_LABELS + 16))
    assert "--max-images" not in capsys.readouterr().err


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """The embedded sample packed by `pretexts shard` (labelled train and val shards of 100 images)."""
    out = tmp_path_factory.mktemp("packed")
    result, _ = run_cli(["shard", "sample", out, "--shard-size", "100", "--force"])
    assert result.exit_code == 0, result.output
    return out


def test_shards_written_by_pretexts_shard_train_from_the_command_line(tmp_path, packed):
    args = ["train", "--data", packed, "--backbone", "test_resnet", "--epochs", "1", "--batch-size", "16"]
    args += ["--eval-images", "16", "--monitor-images", "16"]  # of the 80 held-out images: says which option
    result, _ = run_cli([*args, "--max-steps-per-epoch", "2", "--workers", "0", "--out", tmp_path / "run"])
    assert result.exit_code == 0, result.output
    assert "reading its first 16 of 80 images (the largest of --eval-images, --monitor-images" in result.output
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [1, 2] and all(math.isfinite(row["loss"]) for row in log)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["data"] == str(packed)


def test_finetune_streams_the_training_shards_and_scores_every_val_image(tmp_path, packed):
    cfg = FinetuneConfig(
        from_scratch=True,
        backbone="test_resnet",
        data=str(packed),
        epochs=1,
        max_steps_per_epoch=3,
        out=str(tmp_path),
        **{**SMALL_DATA, "workers": 2},
    )
    tuner = Finetuner(cfg, echo=lambda line: None)
    assert isinstance(tuner.train_set, ImageStream) and tuner.classes[0] == "airplane"
    results = tuner.run()
    assert results["val_images"] == 80 and results["classes"] == 10 and len(results["top1"]) == 1
    cfg = FinetuneConfig(from_scratch=True, backbone="test_resnet", data=str(packed), label_fraction=0.1)
    with pytest.raises(DataError, match="--label-fraction draws a class-balanced subset"):
        Finetuner(cfg, echo=lambda line: None)


def test_a_stream_resumed_twice_or_with_more_held_out_images_is_not_taken_for_changed_data(tmp_path):
    """A stream's length is what is left of its epoch, and its held-out images are cut to --eval-images: neither
    is the data changing, so neither refuses a resume (a requeued job resumed a second time, a larger
    --eval-images). A folder's image list is what a resume checks."""
    import dataclasses

    data = shards("wds", tmp_path / "shards")
    TermAtStep4(config(data, tmp_path / "stopped")).run()
    Pretrainer(config(data, tmp_path / "stopped", resume="auto")).run()  # resumed mid-epoch, to the end
    assert load_checkpoint(tmp_path / "stopped" / "checkpoint.pt")["data_images"] is None
    Pretrainer(dataclasses.replace(config(data, tmp_path / "stopped", resume="auto"), epochs=3)).run()
    more = write_shard_set(tmp_path / "more", train=[8] * 8, val=[40])
    TermAtStep4(config(more, tmp_path / "eval")).run()
    Pretrainer(dataclasses.replace(config(more, tmp_path / "eval", resume="auto"), eval_images=30)).run()
