"""Representation quality against pretraining time: energy (exact, finite-difference) vs AE vs MAE vs SimMIM vs
random init. A use of `pretexts compare`'s cells (engine/compare/cells.py): the same budgeted
pretraining, probes, fine-tune and cache, over several backbones and the study's named rows.

`energy-paper` is the energy method with `--recipe paper`, to measure what the fast default costs downstream.

    python studies/representation/representation.py --minutes 5 15 --seeds 0 1 2 --jobs 2

For each backbone, method and seed, one pretraining run on the CIFAR-10 subset's train/ is stopped at each
budget in --minutes (a snapshot checkpoint is written there); every snapshot is evaluated on val/ with
frozen features (kNN k=20, cosine and standardised, and the linear probe), and the last one is also fine-tuned
(--finetune-epochs, the small-data recipe: `pretexts finetune --recipe small`). Random init is evaluated once and
drawn flat. Prints mean +- std over seeds per cell and writes OUT/representation.png (top-1 against
pretraining minutes, one line per method, the seeds' std shaded).

Budgets are minutes of one CPU thread (process time, 1 torch thread, no loader workers), so two cells run side by
side (--jobs 2), or a busy machine, get the same compute as one alone; --clock wall times them by the wall clock
instead (for GPUs: --device cuda --clock wall --workers 8). --steps 100 250 budgets optimizer steps instead (every
method the same steps, the per-step comparison; the table gives the minutes they took). Every cell is cached as
OUT/BACKBONE/METHOD/seedS/cell.json (by default in studies/representation/cells/minutes/, committed): a finished
cell is never run again, so the study grows over several sessions (add seeds, backbones or a budget and run again:
a new budget reruns that cell's pretraining, since its checkpoints are not kept, and probes only the budgets not
cached yet). A cell being run holds a `claim` file (its process id), so several studies can share one cache, e.g.
one per backbone with its own --finetune-epochs.
Asserts nothing.
"""

import argparse
import ctypes
import json
import multiprocessing
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from arms import COLORS, METHODS, OWN_MASKS, VIT_ONLY

from pretexts.engine.compare.cells import Arm, changes_text, load_cell, run_cell, setting_changes, settings
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.compare.report import budget_text, cell_text
from pretexts.engine.compare.report import summarise as summarise_cells
from pretexts.errors import PretextsError

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10-subset"
RESULTS = Path(__file__).resolve().parent / "cells" / "minutes"  # committed: the study grows across sessions


def arm(args, name: str) -> Arm:
    """A study row as a `pretexts compare` arm: the method, its overrides, and --task where the method reads it."""
    if METHODS[name] is None:  # random init; its cells ran before positions=auto gave a ViT the sin-cos table
        return Arm(name, None, {"positions": "learned"})
    method, overrides = METHODS[name]
    if method == "energy":  # its rows ran before loss=auto and positions=auto: mse and learned, unless the row says
        overrides = {"loss": "mse", "positions": "learned", **overrides}
        if "recipe" not in overrides:  # and before schedule=auto: the fast recipe's constant lr
            overrides = {"schedule": "constant", **overrides}
    return Arm(name, method, overrides if method in OWN_MASKS else {"task": args.task, **overrides})


def study(args, backbone: str) -> CompareConfig:
    """The settings every cell of one backbone shares, in `pretexts compare`'s terms."""
    return CompareConfig(
        backbone=backbone,
        data=args.data,
        img_size=args.img_size,
        batch_size=args.batch_size,
        budget=() if args.steps else tuple(args.minutes),
        steps=tuple(args.steps or ()),
        clock=args.clock,
        finetune_epochs=args.finetune_epochs,
        finetune_amp=args.finetune_amp,
        threads=args.threads,
        workers=args.workers,
        device=args.device,
    )


def end_with_study() -> None:
    """Each cell's process initializer: the cell gets SIGTERM when the study's process dies (Linux). A study stopped by
    `timeout` or a scheduler's SIGTERM would otherwise leave its cells running for their minutes, holding the
    study's output pipe open: an H200 call ran out its limit that way and lost the cells it meant to pack."""
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def cell_pool(jobs: int) -> ProcessPoolExecutor:
    """The processes the study's cells run in: spawned, each ending with the study. Not a multiprocessing.Pool: its
    daemonic workers may not start the loader's (--workers)."""
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=end_with_study)


def run_study_cell(args, backbone: str, name: str, seed: int) -> dict | None:
    if args.workers and "fork" in multiprocessing.get_all_start_methods():
        # A spawned cell's loaders would spawn their workers too, each importing torch and the package again at
        # every epoch and held-out evaluation: a 3-minute ViT-S cell on a GPU had not finished after 9 minutes.
        multiprocessing.set_start_method("fork", force=True)
    folder = Path(args.out) / backbone / name / f"seed{seed}"
    return run_cell(study(args, backbone), arm(args, name), seed, folder, args.keep_checkpoints)


def cells(args) -> list:
    return [
        (b, m, s)
        for b in args.backbones
        for m in args.methods
        for s in args.seeds
        if not (m in VIT_ONLY and "vit" not in b)
    ]


def measured_otherwise(args) -> str | None:
    """One line naming the first cached cell the arguments ask for that was measured with other settings."""
    for backbone, name, seed in cells(args):
        path = Path(args.out) / backbone / name / f"seed{seed}" / "cell.json"
        if not path.is_file():
            continue
        changes = setting_changes(json.loads(path.read_text()), settings(study(args, backbone), arm(args, name)))
        if changes:
            return (
                f"{path} was measured with other settings ({changes_text(changes)}); give another --out, "
                f"or remove {path.parent} to measure it again"
            )
    return None


def summarise(args, results: dict) -> list[dict]:
    """`pretexts compare`'s rows (report.summarise) per backbone, with a 'backbone' key, in the cells' (--methods)
    order; only the budgets in --minutes (or --steps) and the fine-tunes of --finetune-epochs' length (a cell keeps
    other studies' too)."""
    return [
        {"backbone": backbone, **row}
        for backbone in args.backbones
        for row in summarise_cells(
            {(name, seed): cell for (b, name, seed), cell in results.items() if b == backbone},
            args.steps or args.minutes,
            args.finetune_epochs,
            "steps" if args.steps else "minutes",
        )
    ]


def tuning(row: dict, unit: str = "") -> str:
    """'15', or '15, bf16' where the fine-tunes did not run in fp32."""
    low = [p for p in row["finetune_precision"] if p != "fp32"]
    return ", ".join(["/".join(map(str, row["finetune_epochs"])) + unit, *low])


def print_table(rows: list[dict]) -> None:
    print(
        "| backbone | method | minutes | seeds | steps | kNN k=20 top-1 | kNN standardised | linear probe top-1 "
        "| fine-tune top-1 (epochs) | held-out restored / corrupted | max top-component share |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        tuned = cell_text(r["finetune"]) + (f" ({tuning(r)})" if r["finetune"] else "")
        share = "-" if r["top_share"] is None else f"{r['top_share']:.2f}"
        print(
            f"| {r['backbone']} | {r['arm']} | {r['minutes']:g} | {r['seeds']} | {r['steps']:.0f} "
            f"| {cell_text(r['knn'])} | {cell_text(r['knn_std'])} | {cell_text(r['linear'])} | {tuned} "
            f"| {cell_text(r['held_out'])} | {share} |"
        )


def plot(args, rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(args.backbones), 4, figsize=(18, 3.6 * len(args.backbones)), squeeze=False)
    top = max(args.steps or args.minutes)
    for i, backbone in enumerate(args.backbones):
        for ax, (score, title) in zip(
            axes[i], [("knn", "kNN k=20, cosine"), ("knn_std", "kNN k=20, standardised"), ("linear", "linear probe")]
        ):
            for name in args.methods:
                mine = [r for r in rows if r["backbone"] == backbone and r["arm"] == name and r[score] is not None]
                if not mine:
                    continue
                xs = [0.0, top] if name == "random" else [r["budget"] for r in mine]
                mean, std = zip(*([mine[0][score]] * 2 if name == "random" else [r[score] for r in mine]))
                ax.plot(
                    xs,
                    mean,
                    "--" if name == "random" else "-o",
                    color=COLORS[name],
                    label=f"{name} ({mine[0]['seeds']} seeds)",
                )
                ax.fill_between(
                    xs,
                    [m - s for m, s in zip(mean, std)],
                    [m + s for m, s in zip(mean, std)],
                    color=COLORS[name],
                    alpha=0.2,
                )
            ax.set_title(f"{backbone}: {title}")
            ax.set_xlabel("pretraining steps" if args.steps else f"pretraining minutes ({args.clock} clock)")
            ax.set_ylabel("top-1 on val/ (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        tuned = [r for r in rows if r["backbone"] == backbone and r["finetune"] is not None]
        ax = axes[i][3]
        if not tuned:
            ax.axis("off")
            ax.text(0.5, 0.5, f"{backbone}: not fine-tuned", ha="center", va="center", transform=ax.transAxes)
            continue
        for x, r in enumerate(tuned):
            ax.errorbar([x], [r["finetune"][0]], [r["finetune"][1]], fmt="o", capsize=4, color=COLORS[r["arm"]])
        ax.set_xticks(
            range(len(tuned)),
            [f"{r['arm']} {budget_text(r)}, {tuning(r, ' ep.')}" for r in tuned],
            rotation=35,
            ha="right",
            fontsize=8,
        )
        ax.set_title(f"{backbone}: fine-tuned (last snapshot)")
        ax.set_ylabel("top-1 on val/ (%), mean +- std")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        default=str(SHARED_DATA),
        help="an ImageFolder tree with train/ and val/ (labelled); default: ../shared/data/cifar10-subset beside the "
        "repository",
    )
    parser.add_argument("--backbones", nargs="+", default=["vit_tiny", "convnext_atto"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--minutes", nargs="+", type=float, default=[5, 15, 30, 60], help="budgets to evaluate at")
    parser.add_argument(
        "--steps",
        nargs="+",
        type=int,
        help="budgets in optimizer steps instead of minutes (equal steps for every method); use another --out, "
        "a cell's budgets are all minutes or all steps",
    )
    parser.add_argument("--clock", choices=("process", "wall"), default="process")
    parser.add_argument(
        "--task", default="random-mask", help="the energy and AE methods' corruption (MAE masks its own)"
    )
    parser.add_argument("--img-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--finetune-epochs",
        type=int,
        default=10,
        help="of the last snapshot; 0: none run (fine-tunes cached before are still reported)",
    )
    parser.add_argument(
        "--finetune-amp",
        choices=("off", "bf16"),
        default="off",
        help="the fine-tunes' precision (bf16: about 1.3x faster on a CPU with native bf16, far slower without)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per cell")
    parser.add_argument("--jobs", type=int, default=1, help="cells run side by side")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (a GPU wants --clock wall and --workers)")
    parser.add_argument(
        "--workers", type=int, default=0, help="loader processes (0 on a CPU: the process clock counts loading)"
    )
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep the snapshot checkpoints (large)")
    parser.add_argument("--cached-only", action="store_true", help="run nothing: report the cells already in OUT")
    parser.add_argument("--out", default=str(RESULTS), help="the cache; its cell.json files are the study's record")
    args = parser.parse_args(argv)
    if any(m <= 0 for m in args.minutes):
        parser.error("--minutes must be > 0")
    if args.steps and any(n < 1 for n in args.steps):
        parser.error("--steps must be >= 1")
    if args.data == str(SHARED_DATA) and not SHARED_DATA.is_dir():  # never another data set in its place
        parser.exit(
            2, f"{parser.prog}: the default data {SHARED_DATA} is missing; give --data a folder with train/ and val/\n"
        )
    if not args.cached_only and (problem := measured_otherwise(args)):
        parser.exit(1, f"{parser.prog}: {problem}\n")
    todo = cells(args)
    if args.cached_only:
        todo = [c for c in todo if (Path(args.out) / c[0] / c[1] / f"seed{c[2]}" / "cell.json").is_file()]
    print(
        f"{len(todo)} cells on {args.data}: {' '.join(args.backbones)} x {' '.join(args.methods)} x seeds "
        f"{' '.join(map(str, args.seeds))}; budgets "
        + (
            f"{' '.join(map(str, sorted(args.steps)))} steps"
            if args.steps
            else f"{' '.join(f'{m:g}' for m in sorted(args.minutes))} min ({args.clock} clock)"
        ),
        flush=True,
    )
    results = {}
    if args.cached_only:
        results = {c: load_cell(Path(args.out) / c[0] / c[1] / f"seed{c[2]}" / "cell.json") for c in todo}
        todo = []
    with cell_pool(args.jobs) as pool:
        pending = {cell: pool.submit(run_study_cell, args, *cell) for cell in todo}
        for cell, job in pending.items():
            result = job.result()
            if result is None:
                print(f"skipped {'/'.join(map(str, cell))}: another process runs it", flush=True)
                continue
            results[cell] = result
            print(f"done {'/'.join(map(str, cell))}", flush=True)
    rows = summarise(args, results)
    print_table(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot(args, rows, out / "representation.png")
    plot_monitor(args, results, out / "monitor.png")
    (out / "representation.json").write_text(
        json.dumps({"args": vars(args), "cells": {"/".join(map(str, c)): r for c, r in results.items()}}, indent=2)
    )
    print(f"wrote {out / 'representation.png'}, {out / 'monitor.png'}, {out / 'representation.json'}")


def plot_monitor(args, results: dict, path: Path) -> None:
    """The representation while it formed: each pretraining's monitor history (one line per seed, one colour per
    method), for the top component's share of variance and the energy's correlation with brightness."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("top_pc_share", "top component's share of variance"),
        ("energy_brightness_corr", "energy's correlation with brightness"),
    ]
    fig, axes = plt.subplots(len(args.backbones), 2, figsize=(10, 3.4 * len(args.backbones)), squeeze=False)
    for i, backbone in enumerate(args.backbones):
        for ax, (key, title) in zip(axes[i], panels):
            for (b, name, seed), cell in results.items():
                history = [row for row in cell.get("monitor") or [] if key in row]
                if b != backbone or not history:
                    continue
                ax.plot(
                    [row["step"] for row in history],
                    [row[key] for row in history],
                    "-o",
                    markersize=2,
                    color=COLORS[name],
                    alpha=0.8,
                    label=name if seed == args.seeds[0] else None,
                )
            ax.set_title(f"{backbone}: {title}", fontsize=10)
            ax.set_xlabel("optimiser step")
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    try:
        main()
    except PretextsError as error:  # a user's mistake (data, settings), raised in a cell: its one line, not a traceback
        sys.exit(f"{Path(__file__).name}: {error}")
