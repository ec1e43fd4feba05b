"""The length study's table and plot: fine-tuned score against pretraining steps for each arm, from the study's cells
beside the representation study's cells of the default, MAE and random init (the references every arm is one change
from); under it, alpha against steps from the training curve each cell keeps.

    python studies/length/report.py     # writes docs/results/length.png
    python studies/tables.py            # writes the `length` table on docs/results/length.md
"""

import argparse
import json
import statistics
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CELLS = ROOT / "studies" / "length" / "cells"
REFERENCE = ROOT / "studies" / "representation" / "cells"
PLOT = ROOT / "docs" / "results" / "length.png"
BACKBONES = ("vit_tiny", "convnext_atto")
ARM_ORDER = ("default", "paper", "fast-cosine", "fast-cosine-half", "alpha-lr1", "alpha-fixed", "alpha-lr1-cosine")
VIT_DEFAULT = "energy-centred-sincos"  # the representation study's ViT default: patch-centred loss, sin-cos positions
COLOURS = {
    "default": "C0",
    "MAE": "C1",
    "MAE†": "C7",
    "paper": "C2",
    "fast-cosine": "C3",
    "fast-cosine-half": "C6",
    "alpha-lr1": "C4",
    "alpha-fixed": "C5",
    "alpha-lr1-cosine": "C8",
}


@dataclass(frozen=True)
class Point:
    """One budget of one start: each seed's steps, linear probe and 15-epoch fine-tuned top-1, and what the monitor
    read there: the held-out restoration error over the corrupted input's, and the top principal component's share
    of the features' variance (seeds without a reading are left out of those two)."""

    steps: list[int]
    linear: list[float]
    finetuned: list[float]
    restored: list[float]
    top_share: list[float]

    def mean_steps(self) -> float:
        return statistics.mean(self.steps)

    def finetuned_mean_std(self) -> tuple[float, float]:
        tuned = self.finetuned
        return statistics.mean(tuned), statistics.stdev(tuned) if len(tuned) > 1 else 0.0


@dataclass(frozen=True)
class Series:
    """A start's points against steps, and where its cells come from."""

    backbone: str
    label: str
    source: str
    points: tuple[Point, ...]


def _point(cells: list[Path], key: str) -> Point | None:
    """The seeds of `cells` whose snapshot `key` was fine-tuned for 15 epochs."""
    steps, linear, tuned, restored, top_share = [], [], [], [], []
    for path in cells:
        cell = json.loads(path.read_text())
        finetune = cell["finetunes"].get(key)
        if not finetune or finetune.get("epochs") != 15:
            continue
        point = cell["points"][key]
        steps.append(point["steps"])
        linear.append(point["linear"])
        tuned.append(finetune["final"])
        if point.get("held_out_ratio") is not None:  # null where the corrupted error was 0
            restored.append(point["held_out_ratio"])
        shares = [m["top_pc_share"] for m in cell.get("monitor", []) if m["step"] == point["steps"]]
        top_share += shares[-1:]
    return Point(steps, linear, tuned, restored, top_share) if tuned else None


def _series(backbone: str, label: str, source: str, folders: list[tuple[Path, str]]) -> Series | None:
    found = (_point(sorted(folder.glob("seed*/cell.json")), key) for folder, key in folders)
    points = tuple(sorted((p for p in found if p), key=Point.mean_steps))
    return Series(backbone, label, source, points) if points else None


def arm_folders(backbone: str, arm: str) -> list[Path]:
    """`<arm>-<steps>` folders of one arm (not of an arm whose name starts with this one's, as `fast-cosine-half`)."""
    return sorted(f for f in (CELLS / backbone).glob(f"{arm}-*") if f.is_dir() and f.name[len(arm) + 1 :].isdigit())


def study_series(backbone: str) -> list[Series]:
    """The length study's arms on `backbone`: `<arm>-<steps>/seed*/cell.json`, each fine-tuned from its end."""
    series = []
    for arm in ARM_ORDER:
        folders = [(f, f.name.rsplit("-", 1)[1]) for f in arm_folders(backbone, arm)]
        if made := _series(backbone, arm, "length", folders):
            series.append(made)
    return series


def reference_series(backbone: str) -> list[Series]:
    """The default, MAE and random init on `backbone` as the representation study's cells hold them."""
    study = "representation"
    if backbone == "vit_tiny":
        budgets = ("100", "250", "544")
        wanted = [
            ("default", [(REFERENCE / f"steps{b}" / backbone / VIT_DEFAULT, b) for b in budgets]),
            # MAE before its decoder took the class token (its class-token output untrained), and after
            ("MAE†", [(REFERENCE / f"steps{b}" / backbone / "mae", b) for b in (*budgets, "1008")]),
            ("MAE", [(REFERENCE / "mae-class-token" / f"steps{b}" / backbone / "mae", b) for b in budgets]),
            ("random init, sin-cos table", [(REFERENCE / "steps1" / backbone / VIT_DEFAULT, "1")]),
        ]
    else:
        minutes = REFERENCE / "minutes" / backbone
        wanted = [
            ("default", [(minutes / "energy", m) for m in ("5", "15", "30")]),
            ("random init", [(minutes / "random", "0")]),
        ]
    return [s for label, folders in wanted if (s := _series(backbone, label, study, folders))]


def all_series() -> list[Series]:
    return [s for b in BACKBONES for s in reference_series(b) + study_series(b)]


def _shown(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} +- {statistics.stdev(values):.{digits}f}"


def length_table() -> str:
    """Every start at every budget, references first (a markdown table with its caption)."""
    lines = [
        "| backbone | start | cells from | steps | seeds | linear probe | fine-tuned | restored / corrupted "
        "| top share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in all_series():
        for p in s.points:
            lines.append(
                f"| {s.backbone} | {s.label} | {s.source} | {p.mean_steps():.0f} | {len(p.finetuned)} "
                f"| {_shown(p.linear)} | {_shown(p.finetuned)} | {_shown(p.restored, 2)} | {_shown(p.top_share, 2)} |"
            )
    caption = (
        "Top-1 (%) on 1,017 held-out CIFAR-10 images after pretraining on 4,068 at 32 px: a linear probe on frozen "
        "features and a 15-epoch fine-tune in fp32; mean +- std over seeds. Restored / corrupted: the held-out "
        "restoration error over the corrupted input's (below 1 restores); top share: the top principal component's "
        "share of the features' variance at the end (near 1 is collapsed). Steps are optimiser steps at batch 64 "
        "(the representation study's convnext_atto ran 5, 15 and 30 CPU-minutes: their mean steps). MAE†: MAE "
        "measured before its decoder took the class token (its class-token output, which the probes read, untrained). "
        "Generated from the committed cells by `python studies/tables.py`."
    )
    return "\n".join([*lines, "", textwrap.fill(caption, 116)])


def alpha_curves(backbone: str) -> dict[str, list[tuple[list[int], list[float]]]]:
    """Arm -> each cell's (steps, alpha) from the training curve its cell.json keeps (cells run before the curve was
    kept have none)."""
    curves = {}
    for arm in ARM_ORDER:
        for path in sorted(p for f in arm_folders(backbone, arm) for p in f.glob("seed*/cell.json")):
            log = json.loads(path.read_text()).get("log") or []
            if log and "alpha" in log[0]:
                curves.setdefault(arm, []).append(([r["step"] for r in log], [r["alpha"] for r in log]))
    return curves


def alpha_panel(ax, backbone: str) -> None:
    """The energy's step size alpha against steps, one line per cell, coloured by arm."""
    for arm, cells in alpha_curves(backbone).items():
        for i, (steps, alpha) in enumerate(cells):
            ax.plot(steps, alpha, color=COLOURS[arm], lw=1.2, label=arm if i == 0 else None)
    ax.set_xlabel("pretraining step")
    ax.set_ylabel("alpha (the restoration's step size)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no training curve kept yet", ha="center", va="center", transform=ax.transAxes)


def plot(path: Path = PLOT) -> None:
    """Top: fine-tuned top-1 against steps, one panel per backbone, one line per start, random init as a band.
    Bottom: alpha against steps for the cells that keep their training curve."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = all_series()
    fig, grid = plt.subplots(2, len(BACKBONES), figsize=(11, 7.6), height_ratios=(3, 2))
    for ax, backbone in zip(grid[1], BACKBONES, strict=True):
        alpha_panel(ax, backbone)
    for ax, backbone in zip(grid[0], BACKBONES, strict=True):
        for s in (s for s in series if s.backbone == backbone):
            means, stds = zip(*(p.finetuned_mean_std() for p in s.points), strict=True)
            if s.label.startswith("random"):
                ax.axhspan(means[0] - stds[0], means[0] + stds[0], color="0.85", label=f"{s.label} (+- std)")
                ax.axhline(means[0], color="0.5", lw=1)
                continue
            # the arms share their budgets: each is nudged sideways (2 % a place on the log axis) to stay visible
            nudge = 1 + 0.02 * (ARM_ORDER.index(s.label) - 2) if s.source == "length" else 1
            steps = [p.mean_steps() * nudge for p in s.points]
            style = "--" if s.source == "representation" else "-"
            colour = COLOURS[s.label]
            ax.errorbar(
                steps, means, yerr=stds, fmt="o" + style, color=colour, capsize=3, label=f"{s.label} ({s.source})"
            )
        ax.set_title(backbone)
        ax.set_xscale("log")
        low, high = ax.get_xlim()
        ax.set_xticks([t for t in (100, 250, 500, 1000, 2000, 4000) if low <= t <= high])
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("pretraining steps (batch 64)")
        ax.set_ylabel("fine-tuned top-1 (%), 15 epochs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Does longer pretraining fine-tune better? (CIFAR-10 subset, 32 px, CPU)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Draw the length study's plot from the committed cells: fine-tuned top-1 against pretraining steps "
        "for each arm beside the default, MAE and random init, and alpha against steps. Its table is written by "
        "`python studies/tables.py`."
    )
    parser.add_argument("--out", type=Path, default=PLOT, help="the plot (default: docs/results/length.png)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    plot(out)
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")


if __name__ == "__main__":
    main()
