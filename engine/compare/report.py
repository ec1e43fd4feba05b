"""A comparison's cells as one ranked table (mean +- std over seeds, ties marked): markdown and CSV with every
column, and one plot. The terminal's narrower table is in terminal.py."""

import csv
import io
import re
import statistics
import zlib
from collections.abc import Callable
from pathlib import Path

from pretexts.engine.compare.ties import RULE, tie_ranks
from pretexts.engine.training.file_writes import save_figure, write_text

# column key -> (the table's header, where a cell keeps it)
SCORE_COLUMNS = {
    "knn": "kNN k=20 top-1",
    "knn_std": "kNN standardised top-1",
    "linear": "linear probe top-1",
    "finetune": "fine-tuned top-1",
}


def mean_std(values: list) -> tuple[float, float] | None:
    if not values:
        return None
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarise(cells: dict, budgets=None, finetune_epochs: int = 0, unit: str = "minutes") -> list[dict]:
    """One row per (arm, budget): {'arm', 'budget', 'unit', 'minutes', 'seeds', 'steps', score: (mean, std) or
    None, 'held_out', 'top_share', 'finetune_epochs', 'finetune_precision'} from {(arm name, seed): cell};
    'held_out' and 'top_share' (the largest over the seeds) are each point's own snapshot's. The
    budget counts `unit` ('minutes' or 'steps'); 'minutes' is the budget, or of a steps budget the mean minutes the
    steps took; 'steps' the mean steps. The random-init row has budget 0. A cell may hold other comparisons'
    points: with `budgets`, only those (and 0) are reported, and with `finetune_epochs`, only fine-tunes of that
    length."""
    by_arm: dict[str, list] = {}
    for (name, _seed), cell in cells.items():
        by_arm.setdefault(name, []).append(cell)
    wanted = None if budgets is None else {0.0, *map(float, budgets)}
    rows = []
    for name, runs in by_arm.items():
        for key in sorted({k for r in runs for k in r["points"] if wanted is None or float(k) in wanted}, key=float):
            points = [r["points"][key] for r in runs if key in r["points"]]
            tunes = [
                r["finetunes"][key]
                for r in runs
                if key in r["finetunes"]
                and (not finetune_epochs or r["finetunes"][key].get("epochs") == finetune_epochs)
            ]
            shares = [s for s in (point_share(r, key) for r in runs if key in r["points"]) if s is not None]
            rows.append(
                {
                    "arm": name,
                    "budget": float(key),
                    "unit": unit,
                    "minutes": float(key)
                    if unit == "minutes"
                    else round(statistics.mean(p.get("seconds", 0.0) for p in points) / 60, 2),
                    "seeds": len(points),
                    "steps": statistics.mean(p["steps"] for p in points),
                    **{
                        score: mean_std([p[score] for p in points if score in p])
                        for score in ("knn", "knn_std", "linear")
                    },
                    "finetune": mean_std([t["final"] for t in tunes]),
                    "finetune_epochs": sorted({t.get("epochs") for t in tunes if t.get("epochs")}),
                    "finetune_precision": sorted({t.get("precision", "fp32") for t in tunes}),
                    "held_out": mean_std([p["held_out_ratio"] for p in points if p.get("held_out_ratio") is not None]),
                    "top_share": max(shares) if shares else None,
                }
            )
    return rows


def point_share(cell: dict, key: str) -> float | None:
    """The top component's share at the point `key`'s snapshot. A cell written before its points recorded it kept
    one run's monitor: its entry at exactly the point's step (the same weights), never a later one, else None."""
    point = cell["points"][key]
    if "top_pc_share" in point:
        return point["top_pc_share"]
    at = [row.get("top_pc_share") for row in cell.get("monitor") or [] if row.get("step") == point.get("steps")]
    return at[-1] if at else None


def ranked(rows: list[dict], rank_by: str) -> list[dict]:
    """The rows at each arm's largest budget, best first by `rank_by` (rows without it last); then the smaller
    budgets in the same order."""
    last = {}
    for row in rows:
        if row["budget"] >= last.get(row["arm"], {"budget": -1})["budget"]:
            last[row["arm"]] = row
    order = sorted(last.values(), key=lambda r: -(r[rank_by] or (float("-inf"),))[0])
    position = {row["arm"]: i for i, row in enumerate(order)}
    return sorted(rows, key=lambda r: (r is not last[r["arm"]], position[r["arm"]], -r["budget"]))


def budget_name(value: float) -> str:
    """A budget as a cell names its point: '15', '0.25', '1000000' (not '1e+06', which loses a step count's
    digits from 1234567 on)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


UNIT_WORDS = {"minutes": "min", "steps": "steps"}  # a budget's unit as the tables and plots write it


def budget_text(row: dict) -> str:
    """'15 min' or '400 steps'."""
    return f"{budget_name(row['budget'])} {UNIT_WORDS[row['unit']]}"


def cell_text(value: tuple | None, digits: int = 2, seeds: int | None = None, sep: str = " +- ") -> str:
    """'37.40 +- 0.60'; of one seed (`seeds` 1) the mean alone: its std of 0 was not measured."""
    if value is None:
        return "-"
    return f"{value[0]:.{digits}f}" if seeds == 1 else f"{value[0]:.{digits}f}{sep}{value[1]:.{digits}f}"


def latest(rows: list[dict]) -> list[bool]:
    """Per row: whether it is its arm's largest budget (the row that is ranked)."""
    top = {}
    for row in rows:
        top[row["arm"]] = max(top.get(row["arm"], -1.0), row["budget"])
    return [row["budget"] == top[row["arm"]] for row in rows]


def ranked_with_ties(rows: list[dict], rank_by: str, val_images: int) -> list[tuple[str, dict]]:
    """(rank, row) best first: the ranked rows get 'N' or '=N' (engine/compare/ties.py), smaller budgets ''."""
    order = ranked(rows, rank_by)
    ranks = iter(tie_ranks([r for r, last in zip(order, latest(order)) if last], rank_by, val_images))
    return [(next(ranks) if last else "", row) for row, last in zip(order, latest(order))]


def columns(rows: list[dict], rank_by: str, clock: str) -> list[tuple[str, str, Callable]]:
    """The full table's columns: (key, header, row -> text); a score no row has is left out."""
    scores = [s for s in SCORE_COLUMNS if any(r[s] is not None for r in rows)]
    return [
        ("arm", "method and pretext", lambda r: r["arm"]),
        ("minutes", f"minutes ({clock})", lambda r: f"{r['minutes']:g}"),
        ("seeds", "seeds", lambda r: str(r["seeds"])),
        ("steps", "steps", lambda r: f"{r['steps']:.0f}"),
        *(
            (
                s,
                SCORE_COLUMNS[s] + (" (ranked by)" if s == rank_by else ""),
                lambda r, s=s: cell_text(r[s], seeds=r["seeds"]),
            )
            for s in scores
        ),
        ("held_out", "held-out restored / baseline", lambda r: cell_text(r["held_out"], seeds=r["seeds"])),
        ("top_share", "max top-component share", lambda r: "-" if r["top_share"] is None else f"{r['top_share']:.2f}"),
    ]


def tie_rule(val_images: int) -> str:
    return RULE.format(val=val_images)


def table(rows: list[dict], rank_by: str, clock: str, val_images: int) -> str:
    """The full markdown table, best first by `rank_by` with ties marked, and the tie rule under it."""
    shown = columns(rows, rank_by, clock)
    lines = ["| rank | " + " | ".join(h for _, h, _ in shown) + " |", "|" + "---|" * (len(shown) + 1)]
    for rank, row in ranked_with_ties(rows, rank_by, val_images):
        lines.append("| " + " | ".join([rank, *(text(row) for _, _, text in shown)]) + " |")
    return "\n".join([*lines, "", tie_rule(val_images)])


def write_csv(rows: list[dict], rank_by: str, clock: str, val_images: int, path: Path) -> None:
    """Every column of the table, one number a cell (mean and std apart), for a spreadsheet or pandas; of one
    seed the std is empty (not measured), not 0."""
    scores = [*SCORE_COLUMNS, "held_out"]
    header = ["rank", "arm", "minutes", "clock", "seeds", "steps"]
    header += [f"{s}_{part}" for s in scores for part in ("mean", "std")]
    header += ["top_share", "finetune_epochs", "finetune_precision", "val_images", "ranked_by", "budget_unit"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for rank, row in ranked_with_ties(rows, rank_by, val_images):
        numbers = [
            x
            for s in scores
            for x in (("", "") if row[s] is None else (row[s][0], "" if row["seeds"] == 1 else row[s][1]))
        ]
        epochs = " ".join(map(str, row["finetune_epochs"]))
        precision = " ".join(row["finetune_precision"])
        writer.writerow(
            [rank, row["arm"], row["minutes"], clock, row["seeds"], row["steps"], *numbers]
            + [row["top_share"] if row["top_share"] is not None else "", epochs, precision, val_images, rank_by]
            + [row["unit"]]
        )
    write_text(path, buffer.getvalue())


PALETTE = [
    f"C{i}" for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)
]  # matplotlib's cycle without its grey (C7): grey is random init


def arm_colours(arms: list[str]) -> dict[str, str]:
    """A colour per arm fixed by its name, not its rank: each arm (in name order) takes the palette slot its name
    hashes to, or the next free one, so an arm keeps its colour from one comparison to the next."""
    colours, taken = {}, set()
    for arm in sorted(set(arms)):
        slot = zlib.crc32(arm.encode()) % len(PALETTE)
        while slot in taken and len(taken) < len(PALETTE):
            slot = (slot + 1) % len(PALETTE)
        taken.add(slot)
        colours[arm] = PALETTE[slot]
    return colours


def plain_title(title: str) -> str:
    """`title` with each quoted absolute path cut to its last component: a figure is shared, a home folder not."""
    return re.sub(r"'(/[^']*)'", lambda m: f"'{Path(m.group(1)).name or m.group(1)}'", title)


def plot(rows: list[dict], rank_by: str, path: Path, title: str, val_images: int | None = None) -> None:
    """One panel per score: each arm's mean (a dot) +- std over seeds (an error bar) at its largest budget, ranked,
    the x axis zoomed to the data; random init grey, its level a dashed line. Arms sit on one row across the panels,
    named on the first; with `val_images` the name carries the table's rank, '=' for a tie. A row of one seed has
    no error bar, and is labelled so where other rows have them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # imported here: the tables need no matplotlib
    from matplotlib.figure import Figure

    order = ranked(rows, rank_by)
    last = [r for r, top in zip(order, latest(order)) if top]
    scores = [s for s in SCORE_COLUMNS if any(r[s] is not None for r in last)]
    colour = {r["arm"]: "0.55" for r in last} | arm_colours([r["arm"] for r in last if r["budget"] > 0])
    single = [r["seeds"] == 1 for r in last]
    mixed = any(single) and not all(single)
    ranks = tie_ranks(last, rank_by, val_images) if val_images else [""] * len(last)
    names = [(f"{rank} " if rank else "") + bar_label(r, mixed=mixed) for rank, r in zip(ranks, last)]
    spread_name = "one seed" if all(single) else "mean +- std" if not mixed else "mean +- std (2+ seeds)"
    xlabel = "top-1 on val/ (%), " + spread_name
    fig = Figure(figsize=(2.4 + 3.0 * len(scores), 0.35 * len(last) + 1.5))  # no pyplot: the caller's backend kept
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(scores), squeeze=False, sharey=True)
    position = {r["arm"]: len(last) - 1 - i for i, r in enumerate(last)}  # best at the top
    for ax, score in zip(axes[0], scores):
        shown = [r for r in last if r[score] is not None]
        means = [r[score][0] for r in shown]
        spread = [0.0 if r["seeds"] == 1 else r[score][1] for r in shown]
        ys = [position[r["arm"]] for r in shown]
        ax.errorbar(means, ys, xerr=None if all(single) else spread, fmt="none", ecolor="0.3", capsize=3, lw=1)
        ax.scatter(means, ys, s=36, c=[colour[r["arm"]] for r in shown], zorder=3, edgecolors="0.2", linewidths=0.5)
        for r in shown:  # random init's level across the panel: what pretraining has to beat
            if r["budget"] == 0:
                ax.axvline(r[score][0], color="0.4", linestyle="--", linewidth=1)
        low = min(m - e for m, e in zip(means, spread))
        high = max(m + e for m, e in zip(means, spread))
        pad = max(0.5, 0.08 * (high - low))  # zoomed to the data: 1-3 points apart must show
        ax.set_xlim(low - pad, high + pad)
        ax.set_title(SCORE_COLUMNS[score] + (" (ranked by)" if score == rank_by else ""), fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.grid(alpha=0.3, axis="x")
    axes[0][0].set_yticks([position[r["arm"]] for r in last], names, fontsize=8)
    axes[0][0].set_ylim(-0.6, len(last) - 0.4)
    tie_note = "\n'=N': tied with rank N (compare.md's rule)" if val_images else ""
    fig.suptitle(plain_title(title) + tie_note, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def bar_label(row: dict, mixed: bool) -> str:
    """A bar's name: the arm, its budget, and where other bars have error bars, '1 seed' on one without."""
    notes = [budget_text(row)] if row["budget"] else []
    notes += ["1 seed"] if mixed and row["seeds"] == 1 else []
    return f"{row['arm']} ({', '.join(notes)})" if notes else row["arm"]
