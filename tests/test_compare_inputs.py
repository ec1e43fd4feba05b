"""What `pretexts compare` says about what it was asked: a name given twice is compared once (and said so), one
seed is shown as a mean without a spread it never measured, and a cache measured under other settings is refused
before the plan calls it cached. Planning and report functions are called directly; nothing is pretrained."""

import csv
import json

import pytest
from cli_runs import fails_cleanly, run_cli, tiny_image_folder
from matplotlib.container import ErrorbarContainer
from test_compare_report import row

from pretexts.engine.compare import report
from pretexts.engine.compare import run as compare_run
from pretexts.engine.compare.cells import arms_for, load_cell, settings
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.compare.report import table, write_csv
from pretexts.engine.compare.terminal import terminal_table
from pretexts.errors import OutputError

ONE_SEED = [
    row("ae on random-mask", (18.75, 0.0), 1, knn=(27.5, 0.0), knn_std=(26.25, 0.0)),
    row("random init", (16.25, 0.0), 1, minutes=0, knn=(27.5, 0.0), knn_std=(26.25, 0.0)),
]


def test_a_name_given_twice_is_kept_once_with_a_note():
    cfg = CompareConfig(
        tasks=("random-mask", "random-mask", "colorization,random-mask"),
        methods=("energy", "energy"),
        seeds=(0, 0, 1),
        budget=("2", "2.0", "5"),
    )
    assert (cfg.tasks, cfg.methods, cfg.seeds, cfg.budget) == (
        ("random-mask", "colorization"),
        ("energy",),
        (0, 1),
        (2.0, 5.0),
    )
    assert cfg.notes == [
        "note: random-mask given 3 times in --tasks: compared once",
        "note: energy given twice in --methods: compared once",
        "note: 0 given twice in --seeds: run once",
        "note: 2 given twice in --budget: scored once",
    ]
    assert len(arms_for(cfg.tasks, cfg.methods)) == 3  # two pairs and random init: one row each
    assert CompareConfig(steps=(5, "5")).notes == ["note: 5 given twice in --steps: scored once"]
    assert CompareConfig(tasks=("random-mask", "colorization")).notes == []


def fake_cell(study, arm, seed, folder, stop=None) -> dict:
    """A scored cell without pretraining or probing: the report is what is tested."""
    key = "0" if arm.method is None else report.budget_name(max(study.budgets))
    point = {"steps": 0 if arm.method is None else 1, "seconds": 0.1, "knn": 27.5, "knn_std": 26.25, "linear": 16.25}
    return {"points": {key: {**point, "val_images": 80}}, "finetunes": {}}


def test_compare_says_the_note_before_the_plan_and_plans_one_pair(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_run, "run_cell", fake_cell)
    cfg = CompareConfig(
        tasks=("random-mask", "random-mask"),
        backbone="test_convnext",
        data=str(tiny_image_folder(tmp_path / "data")),
        steps=(1,),
        batch_size=8,
        threads=1,
        out=str(tmp_path / "out"),
    )
    lines = []
    record = compare_run.compare(cfg, echo=lines.append)
    assert lines[0] == "note: random-mask given twice in --tasks: compared once"
    plan = " ".join(line.strip() for line in lines[1:4])  # wrapped at 100 columns
    assert plan.startswith("plan: 1 pair and random init") and "2 cells (1 to pretrain, 1 random init" in plan
    assert [r["arm"] for r in record["rows"]] == ["energy on random-mask", "random init"]
    shown = "\n".join(lines)
    assert "+-0.0" not in shown and "+- 0.00" not in (tmp_path / "out" / "compare.md").read_text()


def test_one_seed_is_shown_as_its_mean_alone(tmp_path):
    text = terminal_table(ONE_SEED, "linear", "process", 80)
    lines = text.splitlines()
    assert lines[1].split()[-5:-1] == ["27.5", "26.2", "18.8", "0.60"]  # kNN, kNN std, linear, held-out
    assert "+-" not in "\n".join(lines[:3]) and "(one seed, %)" in " ".join(lines[3:])
    markdown = table(ONE_SEED, "linear", "process", 80)
    assert "| 27.50 | 26.25 | 18.75 | 0.60 |" in markdown and "+- 0.00" not in markdown
    write_csv(ONE_SEED, "linear", "process", 80, tmp_path / "compare.csv")
    with open(tmp_path / "compare.csv", newline="") as fh:
        first = next(csv.DictReader(fh))
    assert (first["linear_mean"], first["linear_std"], first["held_out_std"]) == ("18.75", "", "")


def test_several_seeds_keep_their_spread_and_a_mixed_table_says_which_is_which(tmp_path):
    several = [row("ae", (37.4, 0.6), 3), row("random init", (33.1, 0.9), 3, minutes=0)]
    text = terminal_table(several, "linear", "process", 1017)
    assert "37.4 +-0.6" in text and "(mean +- std over seeds, %)" in " ".join(text.splitlines())
    assert "37.40 +- 0.60" in table(several, "linear", "process", 1017)
    write_csv(several, "linear", "process", 1017, tmp_path / "compare.csv")
    with open(tmp_path / "compare.csv", newline="") as fh:
        assert next(csv.DictReader(fh))["linear_std"] == "0.6"
    mixed = [row("ae", (37.4, 0.6), 3), row("simmim", (30.0, 0.0), 1)]
    lines = terminal_table(mixed, "linear", "process", 1017).splitlines()
    assert "37.4 +-0.6" in lines[1] and "30.0" in lines[2] and "+-" not in lines[2]
    assert "(mean +- std over seeds; one seed: the mean, %)" in " ".join(lines[3:])


@pytest.fixture
def figures(monkeypatch):
    """The plot's figures, caught instead of written."""
    caught = []
    monkeypatch.setattr(report, "save_figure", lambda fig, path: caught.append(fig))
    return caught


@pytest.mark.parametrize(
    "rows, xlabel, labels, bars",
    [
        (ONE_SEED, "top-1 on val/ (%), one seed", ["random init", "ae on random-mask (5 min)"], False),
        (
            [row("ae", (37.4, 0.6), 3), row("simmim", (30.0, 0.0), 1)],
            "top-1 on val/ (%), mean +- std (2+ seeds)",
            ["simmim (5 min, 1 seed)", "ae (5 min)"],
            True,
        ),
        (
            [row("ae", (37.4, 0.6), 3), row("simmim", (30.0, 0.5), 3)],
            "top-1 on val/ (%), mean +- std",
            ["simmim (5 min)", "ae (5 min)"],
            True,
        ),
    ],
)
def test_the_plot_draws_no_error_bar_for_one_seed(rows, xlabel, labels, bars, figures, tmp_path):
    report.plot(rows, "linear", tmp_path / "compare.png", "title")
    ax = figures[0].axes[-1]  # the ranked score's panel
    assert ax.get_xlabel() == xlabel
    ticks = [t.get_text() for t in figures[0].axes[0].get_yticklabels()]  # named on the first panel
    assert ticks[::-1] == labels  # ranked: the first tick, at the top, is the best
    (drawn,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert drawn.has_xerr == bars


def cached_cell(out, cfg: CompareConfig) -> None:
    """A finished cell of energy on random-mask, seed 0, measured under `cfg`."""
    arm = arms_for(cfg.tasks, cfg.methods)[0]
    folder = out / "cells" / cfg.backbone / arm.folder / "seed0"
    folder.mkdir(parents=True)
    point = {"steps": 1, "seconds": 0.1, "knn": 27.5, "knn_std": 26.25, "linear": 16.25, "val_images": 2}
    (folder / "cell.json").write_text(json.dumps({"points": {"1": point}, "settings": settings(cfg, arm)}))


@pytest.mark.parametrize(
    "asked, expected",
    [
        (["--batch-size", "16", "--steps", "1"], ["(--batch-size 8, asked 16): rerun with --batch-size 8 to reuse"]),
        (["--batch-size", "8", "--budget", "0.1"], ["(a budget in steps, asked in minutes): give --force"]),
    ],
)
def test_a_cache_of_other_settings_is_refused_before_the_plan(asked, expected, tmp_path):
    data, out = tiny_image_folder(tmp_path / "data"), tmp_path / "out"
    cached_cell(out, CompareConfig(backbone="test_convnext", data=str(data), batch_size=8, steps=(1,)))
    args = ["compare", "--backbone", "test_convnext", "--data", data, "--threads", "1", "--out", out, *asked]
    fails_cleanly(args, f"the cells cached in {out} were measured with other settings", "--force", *expected)
    output = run_cli(args)[0].output
    assert "plan:" not in output and "every cell is cached" not in output  # the error is all it says


def test_a_cache_of_the_same_settings_is_planned_as_cached(tmp_path, monkeypatch):
    """The plan's 'cached' and the run agree: a cell of the asked settings is read back, not run again."""

    def read_back(study, arm, seed, folder, stop=None):  # the cached cell as run_cell reads it, else a fake
        if (folder / "cell.json").is_file():
            return load_cell(folder / "cell.json", settings(study, arm))
        return fake_cell(study, arm, seed, folder)

    monkeypatch.setattr(compare_run, "run_cell", read_back)
    data, out = tiny_image_folder(tmp_path / "data"), tmp_path / "out"
    cfg = CompareConfig(backbone="test_convnext", data=str(data), batch_size=8, steps=(1,), threads=1, out=str(out))
    cached_cell(out, cfg)
    lines = []
    compare_run.compare(cfg, echo=lines.append)
    assert "2 cells (0 to pretrain, 1 random init, 1 cached)" in " ".join(line.strip() for line in lines[:3])
    assert any(line.startswith("[1/2] energy on random-mask, seed 0") and "(cached)" in line for line in lines)


def test_a_cell_refused_by_the_run_says_what_differs(tmp_path):
    cfg = CompareConfig(backbone="test_convnext", batch_size=8)
    arm = arms_for(cfg.tasks, cfg.methods)[0]
    (tmp_path / "cell.json").write_text(json.dumps({"points": {}, "settings": settings(cfg, arm)}))
    with pytest.raises(OutputError, match=r"other settings \(--batch-size 8, asked 32\); give --force"):
        load_cell(tmp_path / "cell.json", settings(CompareConfig(backbone="test_convnext", batch_size=32), arm))


def test_a_cell_continued_from_a_stop_does_not_set_the_pace_of_the_cells_left(tmp_path, monkeypatch):
    """Its wall time is only the rest of a cell: counted as a cell's, it made the ETA of the others too low."""
    from pretexts.engine.compare.plan import Pace

    cfg = CompareConfig(tasks=("random-mask", "colorization"), steps=(1,), out=str(tmp_path / "out"))
    arms = [arm for arm in arms_for(cfg.tasks, cfg.methods) if arm.method]
    stopped = compare_run.cell_folder(cfg, arms[0], 0)
    (stopped / "run").mkdir(parents=True)
    (stopped / "run" / "checkpoint.pt").write_bytes(b"")  # a pretraining stopped mid-way
    now, takes = [0.0], iter([1.0, 90.0])  # the continued cell takes 1 s, the fresh one 90 s

    def timed_cell(*args, **kwargs):
        now[0] += next(takes)
        return fake_cell(*args, **kwargs)

    monkeypatch.setattr(compare_run, "time", type("Clock", (), {"time": staticmethod(lambda: now[0])}))
    monkeypatch.setattr(compare_run, "run_cell", timed_cell)
    monkeypatch.setattr(compare_run, "clock_time", lambda seconds: "--:--")
    pace = Pace(left={"pretrained": 3}, modelled={"pretrained": 50.0})
    compare_run.run_cells(cfg, [(arms[0], 0)], set(), pace, stop=type("Stop", (), {"requested": False}), say=print)
    assert pace.spent.get("pretrained", []) == [] and pace.eta() == 2 * 50.0  # the model, not 1 s a cell
    compare_run.run_cells(cfg, [(arms[1], 0)], set(), pace, stop=type("Stop", (), {"requested": False}), say=print)
    assert pace.spent["pretrained"] == [90.0] and pace.eta() == 90.0
