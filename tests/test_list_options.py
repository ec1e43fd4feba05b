"""`pretexts list` lists one kind of thing at a time: two of --backbones, --methods and --probes, or --all without
--backbones, are refused in one line naming what to give, not silently half-obeyed; and a summary taken from a
docstring is its whole first paragraph, never a first line cut mid-sentence."""

import inspect

import pytest
from cli_runs import fails_cleanly, run_cli

from pretexts.listing_cache import summary_of
from pretexts.registry import METHODS, PROBES, TASKS


@pytest.mark.parametrize(
    "flags,expected",
    [
        (["--methods", "--backbones"], "--backbones and --methods list different things"),
        (["--methods", "--probes"], "--methods and --probes list different things"),
        (["--backbones", "--methods", "--probes"], "--backbones, --methods and --probes list different things"),
    ],
)
def test_two_kinds_at_once_are_refused(flags, expected):
    fails_cleanly(["list", *flags], expected, "give one of them per listing", "`pretexts list --")


@pytest.mark.parametrize("flags", [["--all"], ["--probes", "--all"], ["--methods", "-v", "--all"]])
def test_all_without_backbones_is_refused(flags):
    fails_cleanly(["list", *flags], "--all adds every timm model name", "`pretexts list --backbones --all`")


def first_paragraph(doc: str | None) -> str:
    return " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())


def test_knn_std_is_summarised_by_its_whole_first_sentence():
    result, _ = run_cli(["list", "--probes", "knn-std"])
    assert result.exit_code == 0, result.output
    whole = "one dominant direction (a brightness shortcut) no longer drowns the rest, so the gap to `knn` measures it."
    assert whole in result.output, result.output


@pytest.mark.parametrize("registry", [TASKS, METHODS, PROBES], ids=lambda r: r.group)
def test_every_builtin_is_listed_with_its_own_summary_or_its_docstrings_first_paragraph(registry):
    registry.load()
    for name, entry in registry.table.items():
        own = vars(entry).get("summary") if isinstance(entry, type) else None  # a method's line
        expected = own if isinstance(own, str) and own else first_paragraph(entry.__doc__)
        assert expected and summary_of(entry) == expected, name


def test_a_docstring_wrapped_over_lines_is_joined():
    def wrapped():
        """Cosine kNN on whitened features: the
        first line alone stops mid-sentence.

        Details that the listing leaves out."""

    assert summary_of(wrapped) == "Cosine kNN on whitened features: the first line alone stops mid-sentence."
