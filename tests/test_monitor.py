"""The representation visible while it forms: monitor numbers in log.jsonl, results.json and monitor.png, label-free
on unlabelled folders, best.pt by a monitored metric, a history that survives --resume, one collapse warning."""

import json

import pytest
import torch
from cli_runs import TRAIN, copy_sample_images, one_torch_thread, run_cli  # noqa: F401 (a fixture)

from pretexts.engine.training.checkpoint import load_checkpoint
from pretexts.engine.training.monitor import Monitor

RUN = [
    *TRAIN,
    "--workers",
    "0",
    "--eval-images",
    "4",
    "--figure-images",
    "2",
    "--monitor-every",
    "2",
    "--monitor-images",
    "40",
]


def monitor_rows(out) -> list[dict]:
    return [row for row in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "monitor" in row]


def test_labelled_data_gets_label_free_health_knn_a_figure_and_best_pt(tmp_path):
    out = tmp_path / "run"
    result, _ = run_cli(
        [*RUN, "--epochs", "2", "--max-steps-per-epoch", "3", "--keep-best", "knn_cosine", "--out", out]
    )
    assert result.exit_code == 0, result.output
    rows = monitor_rows(out)
    assert [r["step"] for r in rows] == [2, 3, 4, 6]  # every 2 steps, and the first epoch's end (3)
    for row in rows:
        health = row["monitor"]
        assert set(health) == {"rankme", "top_pc_share", "energy_brightness_corr", "knn_cosine", "knn_standardised"}
        assert 1 <= health["rankme"] <= 40 and 0 < health["top_pc_share"] <= 1
        assert -1 <= health["energy_brightness_corr"] <= 1 and 0 <= health["knn_cosine"] <= 100
    summary = json.loads((out / "results.json").read_text())["monitor"]
    assert summary["measurements"] == 4 and 0 < summary["share_of_run"] < 1
    assert summary["best"]["knn_cosine"] == max(r["monitor"]["knn_cosine"] for r in rows)
    assert (out / "monitor.png").stat().st_size > 0
    best = load_checkpoint(out / "best.pt")
    best_step = next(r["step"] for r in rows if r["monitor"]["knn_cosine"] == summary["best"]["knn_cosine"])
    assert best["global_step"] == best_step and best["config"]["keep_best"] == "knn_cosine"


def test_an_unlabelled_folder_gets_the_label_free_numbers_only(tmp_path):
    flat = tmp_path / "flat"
    copy_sample_images(flat, 40, classes=("x",))
    for path in (flat / "x").iterdir():
        path.rename(flat / path.name)
    (flat / "x").rmdir()
    result, _ = run_cli([*RUN, "--data", flat, "--epochs", "1", "--max-steps-per-epoch", "2", "--out", tmp_path / "r"])
    assert result.exit_code == 0, result.output
    assert set(monitor_rows(tmp_path / "r")[-1]["monitor"]) == {"rankme", "top_pc_share", "energy_brightness_corr"}
    result, error = run_cli(
        [*RUN, "--data", flat, "--epochs", "1", "--keep-best", "knn_cosine", "--out", tmp_path / "r2"]
    )
    assert result.exit_code == 2 and "needs labelled data" in error and "rankme" in error


def test_the_history_survives_a_resume(tmp_path):
    out = tmp_path / "run"
    assert run_cli([*RUN, "--epochs", "1", "--max-steps-per-epoch", "2", "--out", out])[0].exit_code == 0
    result, _ = run_cli(["train", "--resume", "--out", out, "--epochs", "2", "--workers", "0"])
    assert result.exit_code == 0, result.output
    history = load_checkpoint(out / "checkpoint.pt")["monitor"]["history"]
    assert [row["step"] for row in history] == [2, 4]


def test_a_resumed_runs_seconds_count_every_session(tmp_path):
    """results.json's cost numbers cover the whole run, as its measurements, epochs and steps do."""
    out = tmp_path / "run"
    assert run_cli([*RUN, "--epochs", "1", "--max-steps-per-epoch", "2", "--out", out])[0].exit_code == 0
    first = load_checkpoint(out / "checkpoint.pt")  # what the first session had spent when it saved
    assert first["seconds"] > 0 and first["monitor"]["seconds"] > 0
    assert run_cli(["train", "--resume", "--out", out, "--epochs", "2", "--workers", "0"])[0].exit_code == 0
    second = json.loads((out / "results.json").read_text())
    assert second["monitor"]["measurements"] == 2 and second["seconds"] > first["seconds"]
    assert second["monitor"]["seconds"] > first["monitor"]["seconds"]  # its second measurement added to the first's
    share = second["monitor"]["seconds"] / second["seconds"]
    assert second["monitor"]["share_of_run"] == pytest.approx(share)


def test_a_collapse_is_warned_once(capsys):
    import pretexts
    from pretexts.engine import PretrainConfig
    from pretexts.engine.methods import METHODS

    monitor = Monitor.__new__(Monitor)
    cfg = PretrainConfig(method="ae", backbone="test_convnext")  # the warning is about the run's method and task
    monitor.method = METHODS.get("ae")(cfg, pretexts.create_pretext(cfg.task), torch.device("cpu"))
    monitor.warned, monitor.history = False, []
    for step, share in ((10, 0.3), (20, 0.81), (30, 0.4), (40, 0.7), (50, 0.9), (60, 0.95)):
        monitor.history.append({"step": step, "top_pc_share": share})
        monitor.warn_on_collapse()
    lines = capsys.readouterr().err.strip().splitlines()  # a lone spike (step 20) is no collapse
    assert len(lines) == 1 and "step 50" in lines[0] and "90%" in lines[0] and "shortcut" in lines[0]


@pytest.mark.parametrize("method", ["energy", "ae"])
def test_features_are_the_backbones_pooled_output(method, real_images):
    import pretexts
    from pretexts.engine import PretrainConfig
    from pretexts.engine.methods import METHODS

    cfg = PretrainConfig(method=method, backbone="test_convnext")
    m = METHODS.get(method)(cfg, pretexts.create_pretext(cfg.task), torch.device("cpu"))
    m.model = m.build_model().eval()
    with torch.no_grad():
        features = m.features(real_images[:4])
    assert features.shape == (4, m.model.backbone.num_features) and torch.isfinite(features).all()
