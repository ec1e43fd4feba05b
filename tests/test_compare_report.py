"""The comparison's report on crafted rows: which rows are tied and which are ranked, the terminal table within 100
columns, and the markdown and CSV files with every column."""

import csv

from pretexts.engine.compare.report import SCORE_COLUMNS, table, write_csv
from pretexts.engine.compare.terminal import terminal_table
from pretexts.engine.compare.ties import tie_ranks


def row(arm: str, linear: tuple, seeds: int, minutes: float = 5.0, **scores) -> dict:
    """A row as `summarise` makes it."""
    return {
        "arm": arm,
        "budget": minutes,
        "unit": "minutes",
        "minutes": minutes,
        "seeds": seeds,
        "steps": 0 if minutes == 0 else 300,
        "knn": scores.get("knn", (30.0, 1.0)),
        "knn_std": scores.get("knn_std", (31.0, 1.0)),
        "linear": linear,
        "finetune": scores.get("finetune"),
        "finetune_epochs": [15] if scores.get("finetune") else [],
        "finetune_precision": ["fp32"] if scores.get("finetune") else [],
        "held_out": None if minutes == 0 else (0.6, 0.01),
        "top_share": None if minutes == 0 else 0.5,
    }


def test_rows_whose_seed_intervals_overlap_are_tied_and_separated_ones_ranked():
    rows = [
        row("ae on random-mask", (37.40, 0.60), 3),
        row("simmim", (36.64, 2.16), 3),  # overlaps the leader: tied
        row("energy on random-mask", (34.38, 0.91), 3),  # 37.40 - 0.60 > 34.38 + 0.91: a rank of its own
        row("random init", (33.07, 0.91), 3, minutes=0),  # overlaps 34.38 +- 0.91: tied with it
        row("ae on colorization", (30.00, 0.50), 3),
    ]
    assert tie_ranks(rows, "linear", 1017) == ["=1", "=1", "=3", "=3", "5"]


def test_with_one_seed_a_difference_inside_the_binomial_interval_is_a_tie():
    """The issue's case: rank 1 went to the AE at 18.75 against the energy's 17.50, one image of 80."""
    close = [row("ae", (18.75, 0.0), 1), row("energy", (17.50, 0.0), 1)]
    assert tie_ranks(close, "linear", 80) == ["=1", "=1"]
    far = [row("ae", (60.0, 0.0), 1), row("energy", (20.0, 0.0), 1)]  # 20 is far outside 60's interval
    assert tie_ranks(far, "linear", 80) == ["1", "2"]
    # the same one-point gap is a difference on 100,000 images
    assert tie_ranks([row("ae", (18.75, 0.0), 1), row("energy", (17.50, 0.0), 1)], "linear", 100_000) == ["1", "2"]


def test_a_row_without_the_ranked_score_is_not_ranked():
    rows = [row("ae", (40.0, 0.5), 3, finetune=(50.0, 1.0)), row("random init", (30.0, 0.5), 3, minutes=0)]
    assert tie_ranks(rows, "finetune", 80) == ["1", "-"]


def test_the_terminal_table_fits_100_columns_with_every_score_and_long_names():
    long = "energy on a-plugin-task-with-a-very-long-descriptive-name-indeed"
    rows = [
        row(long, (37.4, 0.6), 3, finetune=(55.123, 1.5)),
        row("simmim", (36.6, 2.2), 3, finetune=(54.0, 2.0)),
        row("random init", (33.1, 0.9), 3, minutes=0, finetune=(40.0, 3.0)),
    ]
    text = terminal_table(rows, "linear", "process", 1017)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100, text
    assert "linear*" in lines[0] and "37.4 +-0.6" in lines[1]  # the ranked score is kept, marked
    assert lines[1].split()[0] == "=1" and "..." in lines[1]  # tied, and the long name shortened to fit
    assert "'=' marks a tie" in " ".join(lines[4:])  # the rule under the table


def test_markdown_and_csv_are_written_with_every_column(tmp_path):
    rows = [
        row("ae on random-mask", (37.40, 0.60), 3, finetune=(55.0, 1.0)),
        row("ae on random-mask", (35.0, 0.70), 3, minutes=2.0, finetune=None),
        row("random init", (33.07, 0.91), 3, minutes=0, finetune=(40.0, 2.0)),
    ]
    markdown = table(rows, "linear", "process", 1017)
    header = markdown.splitlines()[0]
    for name in [*SCORE_COLUMNS.values(), "held-out restored / baseline", "max top-component share", "steps"]:
        assert name in header
    assert "37.40 +- 0.60" in markdown and "the 1017 val images" in markdown
    write_csv(rows, "linear", "process", 1017, tmp_path / "compare.csv")
    with open(tmp_path / "compare.csv", newline="") as fh:
        read = list(csv.DictReader(fh))
    # the ranked rows first, then the smaller budget, listed but not ranked
    assert [(r["rank"], r["arm"], r["minutes"]) for r in read] == [
        ("1", "ae on random-mask", "5.0"),
        ("2", "random init", "0"),
        ("", "ae on random-mask", "2.0"),
    ]
    first = read[0]
    for score in [*SCORE_COLUMNS, "held_out"]:
        assert f"{score}_mean" in first and f"{score}_std" in first
    assert float(first["linear_mean"]) == 37.40 and float(first["finetune_std"]) == 1.0
    assert first["val_images"] == "1017" and first["ranked_by"] == "linear"
