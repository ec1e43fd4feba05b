"""`pretexts compare --steps`: every pair pretrained for the same number of optimizer steps (the per-step
comparison papers make), snapshotted and scored at each, the minutes each took reported beside them; a cache of
minutes is not mixed with one of steps, and bad step budgets are refused in one line."""

import csv
import json

import pytest
from cli_runs import (  # noqa: F401 (one_torch_thread: a fixture)
    fails_cleanly,
    one_torch_thread,
    run_cli,
    tiny_image_folder,
)

from pretexts.engine.compare.cells import training_curve
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.compare.report import budget_name

# tiny and fast: a 0.2M-parameter ConvNeXt, 32 training images (4 batches of 8)
BASE = ["compare", "--backbone", "test_convnext", "--batch-size", "8", "--threads", "1"]


@pytest.fixture(scope="module")
def by_steps(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare-steps")
    data = tiny_image_folder(root / "data")
    out = root / "out"
    args = [*BASE, "--steps", "2", "--steps", "5", "--data", data, "--methods", "energy,simmim", "--out", out]
    result, error = run_cli(args)
    assert result.exit_code == 0, error or result.output
    return data, out, result.output


def test_every_pretrained_pair_is_snapshotted_at_exactly_the_asked_steps(by_steps):
    _, out, _ = by_steps
    cells = json.loads((out / "compare.json").read_text())["cells"]
    pretrained = {name: cell for name, cell in cells.items() if not name.startswith("random init")}
    assert sorted(pretrained) == ["energy on random-mask / seed 0", "simmim / seed 0"]
    for cell in pretrained.values():
        assert {key: point["steps"] for key, point in cell["points"].items()} == {"2": 2, "5": 5}
        assert cell["points"]["5"]["seconds"] > cell["points"]["2"]["seconds"] > 0  # the time the steps took
        assert cell["settings"]["budget"] == "steps"
        assert 0 <= cell["points"]["5"]["linear"] <= 100


def test_a_cell_keeps_its_training_curve_once_its_run_folder_is_gone(by_steps):
    _, out, _ = by_steps
    cells = json.loads((out / "compare.json").read_text())["cells"]
    energy, simmim = cells["energy on random-mask / seed 0"], cells["simmim / seed 0"]
    for cell in (energy, simmim):
        assert [row["step"] for row in cell["log"]] == [1, 2, 3, 4, 5]  # every step of a short run
        assert all(row["loss"] > 0 and row["lr"] >= 0 and "monitor" not in row for row in cell["log"])
    assert all(row["alpha"] > 0 for row in energy["log"])  # the method's own number: the energy's step size


def test_a_long_training_log_is_thinned_to_evenly_spaced_steps_ending_at_the_last(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s, "monitor": {}}) + "\n" for s in range(1, 1001)))
    curve = training_curve(log, rows=64)
    steps = [row["step"] for row in curve]
    assert 60 <= len(steps) <= 65 and steps[-1] == 1000 and steps == sorted(set(steps))
    assert {b - a for a, b in zip(steps[:-2], steps[1:-1])} == {16}  # ceil(1000 / 64)
    assert training_curve(tmp_path / "missing.jsonl") == []


def test_the_tables_name_the_budget_in_steps_and_give_the_minutes_taken(by_steps):
    _, out, output = by_steps
    assert "budget 2, 5 steps a pair" in " ".join(output.splitlines())
    assert "the budget was steps, the same for every pair" in " ".join(output.splitlines())
    with (out / "compare.csv").open() as f:
        rows = list(csv.DictReader(f))
    pretrained = [r for r in rows if r["arm"] != "random init"]
    assert {r["budget_unit"] for r in rows} == {"steps"}
    assert sorted((r["arm"], r["steps"]) for r in pretrained) == [
        ("energy on random-mask", "2"),
        ("energy on random-mask", "5"),
        ("simmim", "2"),
        ("simmim", "5"),
    ]
    assert all(float(r["minutes"]) >= 0 for r in pretrained)  # measured, not the budget
    assert [r["rank"] for r in rows if r["steps"] == "2"] == ["", ""]  # the smaller budget: listed, not ranked


def test_a_cache_of_steps_is_not_read_as_minutes(by_steps):
    """The same cells asked again by minutes are refused, not mixed in: 5 steps are not 5 minutes."""
    data, out, _ = by_steps
    fails_cleanly(
        [*BASE, "--budget", "0.015", "--data", data, "--methods", "simmim", "--out", out],
        "measured with other settings (a budget in steps, asked in minutes)",
        "--force",
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--steps", "0"], ["--steps (steps) must be in [1, 10000000], got 0"]),
        (["--steps", "2.5"], ["--steps (steps) must be whole numbers >= 1, got '2.5'"]),
        (["--steps", "10", "--budget", "3"], ["--budget 3", "--steps 10", "not both"]),
    ],
)
def test_bad_step_budgets_are_refused_in_one_line(args, expected, tmp_path):
    fails_cleanly([*BASE, *args, "--out", tmp_path / "out"], *expected)


def test_the_python_api_takes_steps_in_place_of_minutes():
    assert (CompareConfig().budgets, CompareConfig().unit) == ((2.0,), "minutes")
    cfg = CompareConfig(steps=("250,100",))
    assert (cfg.budgets, cfg.unit, cfg.budget) == ((100, 250), "steps", ())


def test_a_large_step_budget_keeps_its_digits_in_a_cells_point_names():
    """1234567 steps would be '1.23457e+06' as minutes were named, and read back as 1234570."""
    names = [budget_name(b) for b in (1234567, 10_000_000, 15.0, 0.25, 0.0)]
    assert names == ["1234567", "10000000", "15", "0.25", "0"]


def test_an_arm_whose_epochs_end_before_its_budget_is_refused_before_it_trains(tmp_path, one_torch_thread):  # noqa: F811
    """An arm planned to fewer steps than the budget (its schedule ending early) would never reach its snapshot."""
    from pretexts.engine.compare.cells import Arm, pretrain
    from pretexts.errors import ParameterError

    data = tiny_image_folder(tmp_path / "data")  # 32 images: 4 steps an epoch at batch 8
    study = CompareConfig(backbone="test_convnext", data=str(data), batch_size=8, steps=("6",), threads=1)
    short = Arm("short", "energy", {"task": "random-mask", "epochs": 1})
    with pytest.raises(ParameterError, match=r"'short' ends after 4 steps \(epochs=1\), before its budget of 6 steps"):
        pretrain(study, short, 0, tmp_path / "cell", [6])
    assert not (tmp_path / "cell" / "run" / "checkpoint.pt").exists()
