"""A comparison's cells as one ranked table (mean +- std over seeds) and one plot."""

import statistics
from pathlib import Path

from pretexts.engine.training.run_folder import save_figure

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


def summarise(cells: dict, budgets=None, finetune_epochs: int = 0) -> list[dict]:
    """One row per (arm, budget): {'arm', 'minutes', 'seeds', 'steps', score: (mean, std) or None, 'held_out',
    'top_share', 'finetune_epochs', 'finetune_precision'} from {(arm name, seed): cell}. The random-init row has
    budget 0. A cell may hold other comparisons' points: with `budgets`, only those (and 0) are reported, and with
    `finetune_epochs`, only fine-tunes of that length."""
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
                    "minutes": float(key),
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
        if row["minutes"] >= last.get(row["arm"], {"minutes": -1})["minutes"]:
            last[row["arm"]] = row
    order = sorted(last.values(), key=lambda r: -(r[rank_by] or (float("-inf"),))[0])
    position = {row["arm"]: i for i, row in enumerate(order)}
    return sorted(rows, key=lambda r: (r is not last[r["arm"]], position[r["arm"]], -r["minutes"]))


def cell_text(value: tuple | None) -> str:
    return "-" if value is None else f"{value[0]:.2f} +- {value[1]:.2f}"


def table(rows: list[dict], rank_by: str, clock: str) -> str:
    """A markdown table, best first by `rank_by`; the column that ranks is marked."""
    scores = [s for s in SCORE_COLUMNS if any(r[s] is not None for r in rows)]
    header = [
        "rank",
        "method and pretext",
        f"minutes ({clock})",
        "seeds",
        "steps",
        *(SCORE_COLUMNS[s] + (" (ranked by)" if s == rank_by else "") for s in scores),
        "held-out restored / baseline",
        "max top-component share",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    seen = {}
    for row in ranked(rows, rank_by):
        rank = seen.setdefault(row["arm"], len(seen) + 1)
        fresh = sum(1 for r in rows if r["arm"] == row["arm"]) == 1 or row["minutes"] == max(
            r["minutes"] for r in rows if r["arm"] == row["arm"]
        )
        lines.append(
            "| "
            + " | ".join(
                [
                    str(rank) if fresh else "",
                    row["arm"],
                    f"{row['minutes']:g}",
                    str(row["seeds"]),
                    f"{row['steps']:.0f}",
                    *(cell_text(row[s]) for s in scores),
                    cell_text(row["held_out"]),
                    "-" if row["top_share"] is None else f"{row['top_share']:.2f}",
                ]
            )
            + " |"
        )
    return "\n".join(lines)


PALETTE = [
    f"C{i}" for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)
]  # matplotlib's cycle without its grey (C7): grey is random init


def plot(rows: list[dict], rank_by: str, path: Path, title: str) -> None:
    """One panel per score: each arm's mean +- std over seeds at its largest budget, ranked; random init grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    last = [r for r in ranked(rows, rank_by) if r["minutes"] == max(x["minutes"] for x in rows if x["arm"] == r["arm"])]
    scores = [s for s in SCORE_COLUMNS if any(r[s] is not None for r in last)]
    pretrained = [r["arm"] for r in last if r["minutes"] > 0]
    colour = {r["arm"]: "0.65" for r in last} | {arm: PALETTE[i % len(PALETTE)] for i, arm in enumerate(pretrained)}
    fig, axes = plt.subplots(1, len(scores), figsize=(4.2 * len(scores), 0.5 * len(last) + 1.6), squeeze=False)
    for ax, score in zip(axes[0], scores):
        shown = [r for r in last if r[score] is not None][::-1]  # best at the top
        ax.barh(
            range(len(shown)),
            [r[score][0] for r in shown],
            xerr=[r[score][1] for r in shown],
            capsize=3,
            color=[colour[r["arm"]] for r in shown],
        )
        ax.set_yticks(
            range(len(shown)),
            [f"{r['arm']} ({r['minutes']:g} min)" if r["minutes"] else r["arm"] for r in shown],
            fontsize=8,
        )
        for r in shown:  # random init's level across the panel: what pretraining has to beat
            if r["minutes"] == 0:
                ax.axvline(r[score][0], color="0.4", linestyle="--", linewidth=1)
        ax.set_title(SCORE_COLUMNS[score] + (" (ranked by)" if score == rank_by else ""), fontsize=9)
        ax.set_xlabel("top-1 on val/ (%), mean +- std")
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
