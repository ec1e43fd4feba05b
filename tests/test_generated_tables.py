"""The tables README.md and the docs quote are generated from the committed cells (studies/tables.py): a page whose
table differs from the cells fails here, and so does a page that repeats a table's score in its own words."""

import importlib.util
import re

import pytest
from docs_blocks import ROOT

SPEC = importlib.util.spec_from_file_location("tables", ROOT / "studies" / "tables.py")
tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tables)


def test_every_generated_table_matches_the_committed_cells():
    stale = [str(p.relative_to(ROOT)) for p in tables.stale()]
    assert not stale, f"generated tables differ from the cells in {stale}: run `python studies/tables.py`"


def test_a_stale_table_is_found_and_rewritten(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        "intro\n<!-- begin generated: verdict -->\n| an old table | 44.1 |\n<!-- end generated: verdict -->\n"
    )
    monkeypatch.setattr(tables, "PAGES", {"verdict": [str(page)], "step-cost": [], "step-cost-h200": [], "length": []})
    monkeypatch.setattr(tables, "STEP_COSTS", tmp_path / "step_costs.py")
    assert set(tables.stale()) == {page, tmp_path / "step_costs.py"}
    monkeypatch.setattr("sys.argv", ["tables.py"])
    tables.main()
    assert tables.stale() == []
    text = page.read_text()
    assert text.startswith("intro\n<!-- begin generated: verdict -->\n| backbone | pretraining |")
    assert "old table" not in text and text.endswith("<!-- end generated: verdict -->\n")


def test_a_page_without_its_block_is_named():
    with pytest.raises(SystemExit, match="no '<!-- begin generated: verdict -->' block"):
        tables.rendered("no markers here\n", "verdict", "| table |")


def test_the_verdict_reads_the_cells_it_names():
    """Each row's scores are means of 15-epoch fine-tunes in [0, 100] from at least two seeds, and its verdict
    names the best mean unless the runner-up is within a standard deviation."""
    for row in tables.VERDICT_ROWS:
        for score in (row.energy, row.random, *row.peers):
            mean, std, seeds = score.mean_std()
            assert 0 < mean < 100 and std >= 0 and seeds >= 2, score
    row = tables.VERDICT_ROWS[0]  # convnext_atto at 5 CPU-minutes: energy ahead of every peer and random init
    assert tables.leader([row.energy, row.random, *row.peers]) == "energy leads"


@pytest.mark.parametrize("page", ["README.md", "docs/results/index.md"])
def test_prose_points_to_the_table_rather_than_repeating_its_scores(page):
    text = (ROOT / page).read_text()
    table = tables.block("verdict").search(text)[2]
    scores = set(re.findall(r"(\d+\.\d) \+-", table))  # the means (a std is too small a number to be telling)
    prose = tables.block("verdict").sub("", text)
    repeated = sorted(s for s in scores if re.search(rf"(?<![\d.]){re.escape(s)}(?![\d])", prose))
    assert not repeated, f"{page} repeats the verdict table's scores {repeated} outside it: point to the table"


def test_the_length_table_holds_every_start_at_its_steps():
    """The length study's table: the references (the default, MAE, random init) and each arm's cells, one row per
    start and budget, with scores in [0, 100] and the vit_tiny default falling from 100 to 544 steps as its cells
    say."""
    rows = [line.split(" | ") for line in tables.length_table().splitlines() if line.startswith("| vit_tiny")]
    starts = {(r[1], int(r[3])) for r in rows}
    references = {("default", 100), ("default", 544), ("MAE†", 544), ("MAE", 250), ("random init, sin-cos table", 1)}
    assert references <= starts
    tuned = {(r[1], int(r[3])): float(r[6].split(" ")[0]) for r in rows}
    assert all(0 < score < 100 for score in tuned.values())
    assert tuned[("default", 544)] < tuned[("default", 100)]
