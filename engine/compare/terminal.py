"""The comparison's table for a terminal: plain aligned columns within 100 characters, one decimal (a point on
a small val set is noise anyway), the rank with ties marked and the rule under it. The full table, every column
at two decimals, is OUT/compare.md and OUT/compare.csv."""

import textwrap

from pretexts.engine.compare.report import SCORE_COLUMNS, cell_text, ranked_with_ties, tie_rule

WIDTH = 100
SHORT = {"knn": "kNN", "knn_std": "kNN std", "linear": "linear", "finetune": "fine-tune"}
GAP = "  "
NAME_WIDTH = 30  # a long plugin name is shortened this far before a column is dropped


def terminal_table(rows: list[dict], rank_by: str, clock: str, val_images: int, width: int = WIDTH) -> str:
    """Rank, row, minutes, seeds, steps, the scores (the ranked one marked *), held-out ratio and top share; where
    that is wider than `width`, the row names are shortened to NAME_WIDTH, then the least telling columns go, then
    the names are shortened further."""
    scores = [s for s in SCORE_COLUMNS if any(r[s] is not None for r in rows)]
    ranked = ranked_with_ties(rows, rank_by, val_images)
    columns = [
        ("rank", lambda rank, r: rank),
        ("method and pretext", lambda rank, r: r["arm"]),
        ("min", lambda rank, r: f"{r['minutes']:g}"),
        ("seeds", lambda rank, r: str(r["seeds"])),
        ("steps", lambda rank, r: f"{r['steps']:.0f}"),
        *(
            (SHORT[s] + ("*" if s == rank_by else ""), lambda rank, r, s=s: cell_text(r[s], 1, r["seeds"], " +-"))
            for s in scores
        ),
        ("held-out", lambda rank, r: "-" if r["held_out"] is None else f"{r['held_out'][0]:.2f}"),
        ("top share", lambda rank, r: "-" if r["top_share"] is None else f"{r['top_share']:.2f}"),
    ]
    cells = [(header, [text(rank, row) for rank, row in ranked]) for header, text in columns]
    cells = shortened(cells, width, NAME_WIDTH)
    droppable = ["top share", "steps", "held-out", *(SHORT[s] for s in scores if s != rank_by)]
    while fitted_width(cells) > width and droppable:
        gone = droppable.pop(0)
        cells = [c for c in cells if c[0] != gone]
    cells = shortened(cells, width, 12)
    lines = [render([h for h, _ in cells], cells)]
    lines += [render([values[i] for _, values in cells], cells) for i in range(len(ranked))]
    budget = (
        "the budget was steps, the same for every pair; min: the minutes they took"
        if any(r["unit"] == "steps" for r in rows)
        else "min: minutes of pretraining"
    )
    single = [r["seeds"] == 1 for r in rows]
    over = "one seed" if all(single) else "mean +- std over seeds" + ("; one seed: the mean" if any(single) else "")
    note = f"* ranked by {SCORE_COLUMNS[rank_by]} ({over}, %); {budget}, {clock} clock. " + tie_rule(val_images)
    return "\n".join(lines + textwrap.wrap(note, width))


def shortened(cells: list, width: int, floor: int) -> list:
    """The names column shortened (to no less than `floor`) by what the table is wider than `width`."""
    header, names = cells[1]
    size = max(len(header), *map(len, names))
    keep = max(floor, size - (fitted_width(cells) - width))
    if keep >= size:
        return cells
    return [cells[0], (shorten(header, keep), [shorten(name, keep) for name in names]), *cells[2:]]


def fitted_width(cells: list) -> int:
    return sum(max(len(h), *map(len, values)) for h, values in cells) + len(GAP) * (len(cells) - 1)


def render(texts: list[str], cells: list) -> str:
    """One line: the names column left-aligned, the others right-aligned, each as wide as its widest entry."""
    parts = []
    for i, (text, (header, values)) in enumerate(zip(texts, cells)):
        size = max(len(header), *map(len, values))
        parts.append(text.ljust(size) if i == 1 else text.rjust(size))
    return GAP.join(parts).rstrip()


def shorten(name: str, size: int) -> str:
    if len(name) <= size:
        return name
    head = (size - 3) // 2 + (size - 3) % 2
    return name[:head] + "..." + name[len(name) - (size - 3 - head) :]
