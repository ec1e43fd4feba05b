"""Does longer pretraining fine-tune better? The energy method's recipe arms against steps, on vit_tiny and
convnext_atto, scored as `pretexts compare` scores a cell (kNN, linear probe, the 15-epoch small-recipe fine-tune).

    python studies/length/length.py --backbones vit_tiny --arms paper fast-cosine --steps 567 --seeds 0

Each arm is one change from the default (`fast` recipe: base lr 1e-3, constant after one warm-up epoch, alpha's
lr x400). Every arm is pretrained once per budget, so each budget is fine-tuned; an arm whose lr schedule ends
where the run is planned to end (cosine) is planned to that budget. Budgets are whole epochs (63 steps at batch 64
on the 4,068 training images), so a planned end is exact.
Every energy arm names its loss and positions (what auto resolves to today), so a cached cell reads back
without help from the package. Cells are cached in studies/length/cells/ (committed); a cached cell measured with
other settings is refused (give another --out, or remove that cell's folder to measure it again). --cached-only
reports every seed cached unless --seeds names some.
"""

import argparse
import json
import sys
from pathlib import Path

from pretexts.engine.compare.cells import Arm, changes_text, load_cell, run_cell, setting_changes, settings
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.compare.report import summarise
from pretexts.engine.compare.scoring import Interrupted
from pretexts.errors import PretextsError

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[2] / "shared" / "data" / "cifar10-subset"
STEPS_PER_EPOCH = 63  # 4068 // 64

# what auto resolves to on each backbone for random-mask (stated, so a cell says what ran)
RESOLVED = {
    "vit_tiny": {"loss": "patch-centred", "positions": "sincos"},
    "convnext_atto": {"loss": "mse", "positions": "learned"},
}
# name -> (overrides over the default, whether the lr schedule is planned to the budget)
# (the fast recipe's lr is constant after the warm-up in every arm but `paper` and `fast-cosine`: given explicitly,
# since `--schedule auto` would decay a ViT's)
CONSTANT = {"schedule": "constant"}
ARMS = {
    "default": (CONSTANT, False),
    "paper": ({"recipe": "paper"}, True),
    "fast-cosine": ({"schedule": "cosine"}, True),
    "fast-cosine-half": ({"schedule": "cosine", "base_lr": 5e-4}, True),
    "alpha-lr1": ({**CONSTANT, "alpha_lr_scale": 1.0}, False),
    "alpha-fixed": ({**CONSTANT, "alpha_lr_scale": 0.0}, False),
    "alpha-lr1-cosine": ({"schedule": "cosine", "alpha_lr_scale": 1.0}, True),  # two changes: the two that held at 567
}


def cells(args) -> list:
    """(backbone, arm, seed, budgets, folder name) for every pretraining run the arguments ask for."""
    runs = []
    for backbone in args.backbones:
        for name in args.arms:
            for seed in args.seeds:
                for budget in args.steps:
                    runs.append((backbone, name, seed, (budget,), f"{name}-{budget}"))
    return runs


def arm(backbone: str, name: str, budgets: tuple) -> Arm:
    overrides, planned = ARMS[name]
    full = {"task": "random-mask", **RESOLVED[backbone], "epochs": 100000, **overrides}
    if planned:  # the schedule ends at the budget: a planned run of that many epochs
        full["epochs"] = budgets[-1] // STEPS_PER_EPOCH
    return Arm(name, "energy", full)


def study(args, backbone: str, budgets: tuple) -> CompareConfig:
    return CompareConfig(
        backbone=backbone,
        data=args.data,
        steps=budgets,
        finetune_epochs=args.finetune_epochs,
        threads=args.threads,
        workers=0,
        device="cpu",
        save_every=STEPS_PER_EPOCH // 3,  # a cell runs for hours: a killed one loses a few minutes, not an epoch
    )


def cached_seeds(out: Path) -> list[int]:
    """Every seed with a cached cell under `out` (BACKBONE/ARM-STEPS/seedS/cell.json)."""
    return sorted({int(p.parent.name[4:]) for p in out.glob("*/*/seed*/cell.json") if p.parent.name[4:].isdigit()})


def measured_otherwise(args) -> str | None:
    """One line naming the first cached cell the arguments ask for that was measured with other settings."""
    for backbone, name, seed, budgets, folder_name in cells(args):
        path = Path(args.out) / backbone / folder_name / f"seed{seed}" / "cell.json"
        if not path.is_file():
            continue
        wanted = settings(study(args, backbone, budgets), arm(backbone, name, budgets))
        changes = setting_changes(json.loads(path.read_text()), wanted)
        if changes:
            return (
                f"{path} was measured with other settings ({changes_text(changes)}); give another --out, "
                f"or remove {path.parent} to measure it again"
            )
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA), help="an ImageFolder tree with train/ and val/ (labelled)")
    parser.add_argument("--backbones", nargs="+", default=["vit_tiny", "convnext_atto"], choices=list(RESOLVED))
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--steps", nargs="+", type=int, default=[126, 252, 567, 1008])
    parser.add_argument(
        "--seeds", nargs="+", type=int, help="default: 0, or with --cached-only every seed cached (as the results page)"
    )
    parser.add_argument("--finetune-epochs", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cached-only", action="store_true", help="run nothing: report the cells already cached")
    parser.add_argument("--out", default=str(HERE / "cells"))
    args = parser.parse_args(argv)
    if any(s % STEPS_PER_EPOCH for s in args.steps):
        parser.error(f"--steps must be whole epochs of {STEPS_PER_EPOCH} steps")
    if args.seeds is None:
        args.seeds = cached_seeds(Path(args.out)) if args.cached_only else [0]
    if not args.cached_only:
        if args.data == str(DATA) and not DATA.is_dir():
            parser.exit(
                2, f"{parser.prog}: the default data {DATA} is missing; give --data a folder with train/ and val/\n"
            )
        if problem := measured_otherwise(args):
            parser.exit(1, f"{parser.prog}: {problem}\n")
    results = {}
    for backbone, name, seed, budgets, folder_name in cells(args):
        folder = Path(args.out) / backbone / folder_name / f"seed{seed}"
        if args.cached_only:
            if (folder / "cell.json").is_file():
                results[(backbone, folder_name, seed)] = load_cell(folder / "cell.json")
            continue
        cell = run_cell(study(args, backbone, budgets), arm(backbone, name, budgets), seed, folder)
        if cell is None:
            print(f"skipped {folder}: another process runs it", flush=True)
            continue
        results[(backbone, folder_name, seed)] = cell
        print(f"done {folder}", flush=True)
    for backbone in args.backbones:
        mine = {(n, s): c for (b, n, s), c in results.items() if b == backbone}
        for row in summarise(mine, None, args.finetune_epochs, "steps"):
            tuned = row["finetune"]
            print(
                f"{backbone} {row['arm']:<16} {row['steps']:>5.0f} steps  seeds {row['seeds']}  "
                f"linear {row['linear'][0]:.1f}  fine-tuned "
                + ("-" if tuned is None else f"{tuned[0]:.1f} +- {tuned[1]:.1f}"),
                flush=True,
            )


if __name__ == "__main__":
    try:
        main()
    except Interrupted as stopped:  # the cell saved what it had: one line, as `pretexts compare` says it
        print(f"{stopped}; the cell keeps what it had. Run the same command again to continue.", file=sys.stderr)
        sys.exit(stopped.exit_code)
    except PretextsError as error:  # a user's mistake (data, settings): its one line, not a traceback
        sys.exit(f"{Path(__file__).name}: {error}")
