"""A comparison's cells as one ranked table (mean +- std over seeds, ties marked): markdown and CSV with every
column, and one plot. The terminal's narrower table is in terminal.py."""

import csv
import io
import statistics
from collections.abc import Callable
from pathlib import Path

from pretexts.engine.compare.ties import RULE, tie_ranks
from pretexts.engine.training.run_folder import save_figure, write_text

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
    None, 'held_out', 'top_share', 'finetune_epochs', 'finetune_precision'} from {(arm name, seed): cell}. The
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
            shares = [row["top_pc_share"] for r in runs for row in r.get("monitor") or [] if "top_pc_share" in row]
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


def plot(rows: list[dict], rank_by: str, path: Path, title: str) -> None:
    """One panel per score: each arm's mean +- std over seeds at its largest budget, ranked; random init grey. A
    row of one seed has no error bar, and is labelled so where other rows have them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = ranked(rows, rank_by)
    last = [r for r, top in zip(order, latest(order)) if top]
    scores = [s for s in SCORE_COLUMNS if any(r[s] is not None for r in last)]
    pretrained = [r["arm"] for r in last if r["budget"] > 0]
    colour = {r["arm"]: "0.65" for r in last} | {arm: PALETTE[i % len(PALETTE)] for i, arm in enumerate(pretrained)}
    single = [r["seeds"] == 1 for r in last]
    xlabel = "top-1 on val/ (%), " + (
        "one seed" if all(single) else "mean +- std" if not any(single) else "mean +- std (2+ seeds)"
    )
    fig, axes = plt.subplots(1, len(scores), figsize=(4.2 * len(scores), 0.5 * len(last) + 1.6), squeeze=False)
    for ax, score in zip(axes[0], scores):
        shown = [r for r in last if r[score] is not None][::-1]  # best at the top
        ax.barh(
            range(len(shown)),
            [r[score][0] for r in shown],
            xerr=None if all(single) else [0.0 if r["seeds"] == 1 else r[score][1] for r in shown],
            capsize=3,
            color=[colour[r["arm"]] for r in shown],
        )
        ax.set_yticks(
            range(len(shown)),
            [bar_label(r, mixed=any(single) and not all(single)) for r in shown],
            fontsize=8,
        )
        for r in shown:  # random init's level across the panel: what pretraining has to beat
            if r["budget"] == 0:
                ax.axvline(r[score][0], color="0.4", linestyle="--", linewidth=1)
        ax.set_title(SCORE_COLUMNS[score] + (" (ranked by)" if score == rank_by else ""), fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def bar_label(row: dict, mixed: bool) -> str:
    """A bar's name: the arm, its budget, and where other bars have error bars, '1 seed' on one without."""
    notes = [budget_text(row)] if row["budget"] else []
    notes += ["1 seed"] if mixed and row["seeds"] == 1 else []
    return f"{row['arm']} ({', '.join(notes)})" if notes else row["arm"]
