"""The results read like a benchmark page: each study's headline on the results index is at most 40 words, the
representation summary fits 200 lines, and no page speaks the issue tracker's words (a user has no tracker)."""

import re

import pytest
from docs_blocks import ROOT

INDEX = ROOT / "docs" / "results" / "index.md"


def headlines() -> list[str]:
    return re.findall(r"^- \*\*Headline:\*\*(.*?)(?=\n\n|\n- |\n```|\Z)", INDEX.read_text(), re.S | re.M)


def test_every_study_on_the_results_index_has_a_headline():
    studies = re.findall(r"^### ", INDEX.read_text(), re.M)
    assert len(headlines()) == len(studies) >= 5


@pytest.mark.parametrize("headline", headlines(), ids=lambda h: " ".join(h.split()[:4]))
def test_a_headline_is_at_most_40_words(headline):
    assert len(headline.split()) <= 40, headline


def test_the_representation_summary_fits_200_lines():
    assert len((ROOT / "docs" / "results" / "representation.md").read_text().splitlines()) <= 200


def test_no_page_names_an_issue_number():
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [
        f"{page.relative_to(ROOT)}:{n}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if re.search(r"\bissues? [0-9]", line)
    ]
    assert not found, f"say what was done, not its issue number: {found}"
