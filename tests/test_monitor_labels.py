"""`train`'s online kNN monitor scores val/ by train/'s class numbers, matched by folder name as `finetune` and `probe`
match them: a val/ that leaves out one of train/'s classes keeps every other class's label, a val/ class train/ lacks
turns the kNN off (refused in their line where --keep-best asks for the kNN), and an image that cannot be decoded is
warned about once in a run."""

import json
from pathlib import Path

import numpy as np
from cli_runs import TRAIN, fails_cleanly, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from PIL import Image
from test_skipped_decode import write_cut_jpeg

from pretexts.engine.data.labelled_data import labels_of
from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.loop import Pretrainer

COLOURS = {"airplane": (200, 40, 40), "bird": (40, 200, 40), "cat": (40, 40, 200)}
RUN = [*TRAIN, "--epochs", "1", "--max-steps-per-epoch", "1", "--workers", "0", "--eval-images", "4"]
MONITORED = [*RUN, "--figure-images", "2", "--monitor-every", "1", "--monitor-images", "24", "--quiet"]


def colour_folders(root, val_classes, train_images: int = 8, val_images: int = 3):
    """Classes of one noisy colour each: a perfectly separable set, the kNN's top-1 100 % from any features."""
    rng = np.random.default_rng(0)
    for split, classes, count in (("train", COLOURS, train_images), ("val", val_classes, val_images)):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            colour = np.array(COLOURS.get(name, (230, 230, 230)))
            for i in range(count):
                noisy = np.clip(colour + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(noisy).save(root / split / name / f"{name}{i}.png")
    return root


def test_the_monitor_scores_a_val_subset_by_trains_class_numbers(tmp_path):
    data = colour_folders(tmp_path / "data", ("bird", "cat"))  # val/ leaves out airplane, train/'s class 0
    settings = dict(data=str(data), backbone="test_convnext", batch_size=8, workers=0, out=str(tmp_path / "run"))
    trainer = Pretrainer(PretrainConfig(**settings, monitor_images=24))
    monitor = trainer.build_monitor()
    assert sorted(set(monitor.query_labels.tolist())) == [1, 2]  # bird and cat, as train/ numbers them
    assert sorted(set(monitor.bank[1].tolist())) == [0, 1, 2]
    by_folder = {
        Path(path).parent.name: label
        for (path, _), label in zip(trainer.val_set.source.samples, labels_of(trainer.val_set.source))
    }
    assert by_folder == {"bird": 1, "cat": 2}
    result, error = run_cli([*MONITORED, "--data", data, "--keep-best", "knn_cosine", "--out", tmp_path / "cli"])
    assert result.exit_code == 0, error or result.output
    rows = [json.loads(line) for line in (tmp_path / "cli" / "log.jsonl").read_text().splitlines()]
    assert [row["monitor"]["knn_cosine"] for row in rows if "monitor" in row] == [100.0]  # not 0 %


def test_a_val_class_that_train_lacks_turns_the_knn_off_and_is_refused_for_keep_best_knn(tmp_path):
    # pretraining needs no labels: train/2019 and val/2021 need not be classes, so the run goes on without the kNN
    data = colour_folders(tmp_path / "data", ("bird", "cat", "dog"))
    result, error = run_cli([*MONITORED, "--data", data, "--keep-best", "rankme", "--out", tmp_path / "run"])
    assert result.exit_code == 0, error or result.output
    assert result.output.count("only in val/: dog") == 1 and "kNN is off for this run" in result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    monitored = [row["monitor"] for row in rows if "monitor" in row]
    assert monitored and all("rankme" in row and "knn_cosine" not in row for row in monitored)
    assert (tmp_path / "run" / "best.pt").exists()
    error = fails_cleanly(
        [*MONITORED, "--data", data, "--keep-best", "knn_cosine", "--out", tmp_path / "knn"], "only in val/: dog"
    )
    assert "only in train/: airplane" in error and "keep the best by rankme" in error
    assert not (tmp_path / "knn").exists()  # refused before the run folder is made


def test_an_image_cut_in_its_pixel_data_is_warned_about_once_in_a_train_run(tmp_path):
    """The monitor's bank of training images reads through the training set's own warning."""
    data = colour_folders(tmp_path / "data", ("bird", "cat"))
    write_cut_jpeg(data / "train" / "airplane" / "airplane0.jpg")
    (data / "train" / "airplane" / "airplane0.png").unlink()
    result, error = run_cli([*MONITORED, "--max-steps-per-epoch", "3", "--data", data, "--out", tmp_path / "run"])
    assert result.exit_code == 0, error or result.output
    assert result.output.count("airplane0.jpg' cannot be read: image file is truncated") == 1, result.output
