"""How much of a checkpoint's fine-tuned score is the recipe? Fine-tune checkpoints under variants of a recipe.

Each --model is fine-tuned as the representation study's cells are (`engine/compare/scoring.finetune`: the small
recipe, 15 epochs, batch 64, no loader workers, fp32, one torch thread, the cell's seed), changed by each --variant's
NAME=FIELD=VALUE[,FIELD=VALUE] (FinetuneConfig fields: base_lr, layer_decay, epochs, drop_path, ...; `small` alone is
the recipe unchanged).
Every fine-tune is cached as OUT/LABEL/VARIANT/seedS.json (committed), so several processes can fill one table and
a finished one is never run again. Prints top-1 on val/ per model and variant (final epoch, best epoch) and the
per-epoch curve. Asserts nothing.

    python studies/finetune-peak/finetune_sensitivity.py --model steps544=runs/m544/checkpoint.pt \\
        --variant small --variant lr-half=base_lr=2e-3 --seed 2 --out studies/finetune-peak/cells
"""

import argparse
import json
import tempfile
from pathlib import Path

import torch

from pretexts.engine.compare import scoring
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.evaluation.finetune_config import FinetuneConfig

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10-subset"
FIELDS = {f for f in FinetuneConfig.__dataclass_fields__}


def number(value: str):
    """'2e-3' -> 0.002, '.5' -> 0.5, '15' -> 15; anything else stays the string it is ('none')."""
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def variant(text: str) -> tuple[str, dict]:
    """'lr-half=base_lr=2e-3,layer_decay=0.65' -> ('lr-half', {'base_lr': 0.002, 'layer_decay': 0.65})."""
    name, _, rest = text.partition("=")
    changes = {}
    for item in filter(None, rest.split(",")):
        field, _, value = item.partition("=")
        if field not in FIELDS or field in ("checkpoint", "data", "seed", "out"):
            raise argparse.ArgumentTypeError(f"{field!r} is not a FinetuneConfig field a variant may change")
        changes[field] = number(value)
    return name, changes


def finetune(checkpoint: str, changes: dict, args) -> dict:
    """The study's fine-tune (engine/compare/scoring.finetune) of `checkpoint` with `changes`, in a throwaway folder."""
    study = CompareConfig(data=args.data, finetune_epochs=15, finetune_amp="off", workers=0, device=args.device)
    with tempfile.TemporaryDirectory() as out:
        tuned = scoring.finetune(study, Path(checkpoint), args.seed, Path(out), **changes)
    return {key: tuned[key] for key in ("final", "best", "top1")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="LABEL=CHECKPOINT, repeatable")
    parser.add_argument("--variant", action="append", type=variant, required=True, help="NAME[=FIELD=VALUE,...]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=str(SHARED_DATA) if SHARED_DATA.is_dir() else "sample")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1, as the study's cells: fine-tunes side by side)"
    )
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "cells"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for label, checkpoint in (m.split("=", 1) for m in args.model):
        for name, changes in args.variant:
            folder = Path(args.out) / label / name
            cell = folder / f"seed{args.seed}.json"
            if not cell.is_file():
                folder.mkdir(parents=True, exist_ok=True)
                record = {"checkpoint": checkpoint, "changes": changes, **finetune(checkpoint, changes, args)}
                cell.write_text(json.dumps(record, indent=2))
            rows.append((label, name, json.loads(cell.read_text())))
    print("| model | variant | changes | fine-tuned top-1 (final) | best epoch | per epoch |")
    print("|---|---|---|---|---|---|")
    for label, name, r in rows:
        changes = ", ".join(f"{k}={v}" for k, v in r["changes"].items()) or "-"
        curve = " ".join(f"{x:.1f}" for x in r["top1"])
        print(f"| {label} | {name} | {changes} | {r['final']:.2f} | {r['best']:.2f} | {curve} |")


if __name__ == "__main__":
    main()
