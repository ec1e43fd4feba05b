"""`pretexts compare`'s held-out ratio and top-component share of a row are its budget's own, measured from that
point's snapshot: a cell cached from a longer run gives the same columns as a fresh one, no share measured after the
row's steps is shown, and a cell written before points recorded them reads back with '-' where it has no value."""

import json

import pytest
from cli_runs import copy_sample_images, one_torch_thread  # noqa: F401 (one_torch_thread: a fixture)

from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.compare.report import summarise
from pretexts.engine.compare.run import compare


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """32 training and 16 held-out images: enough held-out features for a top share below 1."""
    root = tmp_path_factory.mktemp("data")
    copy_sample_images(root / "train", 16)
    copy_sample_images(root / "val", 8, split="val")
    return root


def run(data, out, *steps) -> dict:
    """`pretexts compare --steps STEPS` of the energy and the AE on random masks, one seed; its rows by (arm, steps)."""
    study = CompareConfig(
        backbone="test_convnext",
        data=str(data),
        tasks=("random-mask",),
        methods=("energy", "ae"),
        steps=steps,
        seeds=(0,),
        batch_size=8,
        threads=1,
        workers=0,
        quiet=True,
        out=str(out),
    )
    record = compare(study, echo=lambda line: None)
    return {(row["arm"], row["budget"]): row for row in record["rows"]}


def test_a_cached_longer_run_gives_a_budgets_held_out_and_share_as_a_fresh_run_does(data, tmp_path):
    run(data, tmp_path / "cached", 4)
    both = run(data, tmp_path / "cached", 2, 4)  # step 2 is scored from a second run, step 4 read back
    cached = run(data, tmp_path / "cached", 2)  # every cell read back
    fresh = run(data, tmp_path / "fresh", 2)
    for arm in ("energy on random-mask", "ae on random-mask"):
        expected = fresh[(arm, 2.0)]
        assert expected["held_out"] is not None and 0 < expected["top_share"] < 1
        for rows in (both, cached):
            assert rows[(arm, 2.0)]["held_out"] == pytest.approx(expected["held_out"])
            assert rows[(arm, 2.0)]["top_share"] == pytest.approx(expected["top_share"])
        assert both[(arm, 4.0)]["held_out"] is not None and both[(arm, 4.0)]["top_share"] is not None
    assert fresh[("random init", 0.0)]["held_out"] is None and fresh[("random init", 0.0)]["top_share"] is None
    cell = json.loads(next((tmp_path / "cached").rglob("energy__random-mask/seed0/cell.json")).read_text())
    assert {key: sorted(point) for key, point in cell["points"].items()} == {
        key: ["held_out_ratio", "knn", "knn_std", "linear", "seconds", "steps", "top_pc_share", "val_images"]
        for key in ("2", "4")
    }


def test_a_cell_written_before_points_held_their_measures_reads_back_without_later_shares():
    """An earlier version kept the held-out ratio at the run's last point only and the monitor of the whole run: a
    point without its own share shows the monitor's entry at its own step, never one measured after it, else '-'."""
    point = {"knn": 30.0, "knn_std": 31.0, "linear": 32.0}
    old = {
        "points": {"2": {**point, "steps": 2}, "4": {**point, "steps": 4, "held_out_ratio": 0.9}},
        "monitor": [{"step": 4, "top_pc_share": 0.2045, "rankme": 3.0}],
        "finetunes": {},
    }
    rows = {row["budget"]: row for row in summarise({("energy", 0): old}, budgets=(2, 4), unit="steps")}
    assert rows[2.0]["held_out"] is None and rows[2.0]["top_share"] is None
    assert rows[4.0]["held_out"] == (0.9, 0.0) and rows[4.0]["top_share"] == 0.2045
