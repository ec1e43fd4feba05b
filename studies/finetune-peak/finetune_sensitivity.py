"""How much of a checkpoint's fine-tuned score is the recipe? Fine-tune checkpoints under variants of a recipe.

Each --model is fine-tuned as the representation study's cells are (`engine/compare/scoring.finetune`: the small
recipe, 15 epochs, batch 64, no loader workers, fp32, one torch thread, the cell's seed), changed by each --variant's
NAME=FIELD=VALUE[,FIELD=VALUE] (FinetuneConfig fields: base_lr, layer_decay, epochs, drop_path, ...; `small` alone is
the recipe unchanged). Prints top-1 on val/ per model and variant (final epoch, best epoch) and the per-epoch curve.
Asserts nothing.

    python studies/finetune-peak/finetune_sensitivity.py --model steps544=runs/m544/checkpoint.pt \\
        --variant small --variant lr-half=base_lr=2e-3 --seed 2 --out runs/finetune-sensitivity
    python studies/finetune-peak/finetune_sensitivity.py --cached-only     # the committed cells

Every fine-tune is cached as OUT/LABEL/VARIANT/seedS.json (by default the committed cells/), with what its number
depends on: the checkpoint's content (its size and SHA-256), the data, the recipe with the variant's changes, and the
seed. A cached fine-tune is read back only where all of these agree, and refused in one line where they do not
(give another --out or LABEL); a finished one is never run again, so several processes can fill one table. Cells
cached before they recorded this (their checkpoint by path alone) are read where the command gives the checkpoint
path, data (the default), device (cpu) and changes they were measured with. --cached-only fine-tunes nothing and
needs no checkpoint: it prints the cached cells, every one under OUT unless --model LABEL, --variant or --seed narrow
them.
"""

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import torch

from pretexts.engine.compare import scoring
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.evaluation.finetune_config import FinetuneConfig

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10-subset"
RECIPE = {"recipe": "small", "epochs": 15, "batch_size": 64, "amp": "off", "workers": 0}  # and the device
RESULT_KEYS = ("final", "best", "top1")
FIELDS = set(FinetuneConfig.__dataclass_fields__)


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


def data_name(data: str) -> str:
    """What a cell records of --data: an existing folder's resolved path, else the name given ('sample')."""
    return str(Path(data).resolve()) if Path(data).exists() else data


def checkpoint_identity(path: Path) -> dict:
    """The checkpoint file's resolved path (for the reader) and its content (the key: a copy reads the same cells)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return {
        "checkpoint": str(path.resolve()),
        "checkpoint_bytes": path.stat().st_size,
        "checkpoint_sha256": digest.hexdigest()[:16],
    }


def settings(changes: dict, args) -> dict:
    """What a fine-tune's number depends on besides its checkpoint and seed, as its cell records it."""
    return {"data": data_name(args.data), "recipe": {**RECIPE, "device": args.device}, "changes": changes}


def same_path(given: str, recorded: str) -> bool:
    return given == recorded or Path(given).resolve() == Path(recorded).resolve()


def legacy_differences(cell: dict, given: str | None, changes: dict, args) -> list[str]:
    """How the command differs from what a cell cached before cells recorded their key was measured with: the
    checkpoint at the path it records, the default data, fp32 on the CPU, its changes."""
    found = []
    if given is not None and not same_path(given, cell["checkpoint"]):
        found.append(f"checkpoint {cell['checkpoint']}, asked {given}")
    if data_name(args.data) != str(SHARED_DATA):
        found.append(f"--data {SHARED_DATA} (the default), asked {args.data}")
    if args.device != "cpu":
        found.append(f"--device cpu, asked {args.device}")
    if cell["changes"] != changes:
        found.append(f"changes {json.dumps(cell['changes'])}, asked {json.dumps(changes)}")
    return found


def differences(cell: dict, wanted: dict) -> list[str]:
    """How `wanted` differs from what `cell` was measured with, for each key `wanted` has (a checkpoint by content)."""
    found = []
    if any(cell.get(key) != wanted[key] for key in ("checkpoint_bytes", "checkpoint_sha256") if key in wanted):
        found.append(
            f"checkpoint {cell['checkpoint']} (SHA-256 {cell['checkpoint_sha256']}), asked {wanted['checkpoint']} "
            f"(SHA-256 {wanted['checkpoint_sha256']})"
        )
    return found + [
        f"{key} {json.dumps(cell.get(key))}, asked {json.dumps(value)}"
        for key, value in wanted.items()
        if key not in ("checkpoint", "checkpoint_bytes", "checkpoint_sha256") and cell.get(key) != value
    ]


def refuse(cell_path: Path, found: list[str]) -> None:
    sys.exit(
        f"{Path(__file__).name}: {cell_path} was measured with other settings ({'; '.join(found)}); give another "
        f"--out or another LABEL, or remove {cell_path} to fine-tune again"
    )


def finetune(checkpoint: Path, changes: dict, args) -> dict:
    """The study's fine-tune (engine/compare/scoring.finetune) of `checkpoint` with `changes`, in a throwaway folder."""
    study = CompareConfig(
        data=args.data,
        finetune_epochs=RECIPE["epochs"],
        batch_size=RECIPE["batch_size"],
        finetune_amp=RECIPE["amp"],
        workers=RECIPE["workers"],
        device=args.device,
    )
    with tempfile.TemporaryDirectory() as out:
        tuned = scoring.finetune(study, checkpoint, args.seed, Path(out), **changes)
    return {key: tuned[key] for key in RESULT_KEYS}


def measured(label: str, checkpoint: str, name: str, changes: dict, args) -> dict:
    """The cell of `checkpoint` under one variant: read back where cached with the same key, else fine-tuned."""
    path = Path(checkpoint)
    cell_path = Path(args.out) / label / name / f"seed{args.seed}.json"
    wanted = {**checkpoint_identity(path), **settings(changes, args), "seed": args.seed}
    if cell_path.is_file():
        cell = json.loads(cell_path.read_text())
        if "checkpoint_sha256" in cell:
            found = differences(cell, wanted)
        else:
            found = legacy_differences(cell, checkpoint, changes, args)
        if found:
            refuse(cell_path, found)
        return cell
    torch.set_num_threads(args.threads)
    cell = {**wanted, **finetune(path, changes, args)}
    cell_path.parent.mkdir(parents=True, exist_ok=True)
    cell_path.write_text(json.dumps(cell, indent=2))
    return cell


def cached(args) -> list[tuple]:
    """(label, variant, seed, cell) of every cached cell the arguments select; a selected one measured otherwise is
    refused."""
    if not Path(args.out).is_dir():
        sys.exit(f"{Path(__file__).name}: no cells in {args.out}: it is not a folder")
    labels = args.model or sorted(p.name for p in Path(args.out).iterdir() if p.is_dir())
    variants = dict(args.variant or [])
    rows = []
    for label in labels:
        for cell_path in sorted((Path(args.out) / label).glob("*/seed*.json")):
            name, seed = cell_path.parent.name, int(cell_path.stem[4:])
            if (variants and name not in variants) or (args.seed is not None and seed != args.seed):
                continue
            cell = json.loads(cell_path.read_text())
            changes = variants.get(name, cell["changes"])
            if "checkpoint_sha256" in cell:
                found = differences(cell, settings(changes, args))
            else:
                found = legacy_differences(cell, None, changes, args)
            if found:
                refuse(cell_path, found)
            rows.append((label, name, seed, cell))
        if not any(row[0] == label for row in rows):
            print(f"no cell cached for {label} in {args.out} (of the variants and seed asked)", file=sys.stderr)
    return rows


def print_table(rows: list[tuple]) -> None:
    print("| model | variant | changes | seed | fine-tuned top-1 (final) | best epoch | per epoch | checkpoint |")
    print("|---|---|---|---|---|---|---|---|")
    for label, name, seed, r in rows:
        changes = ", ".join(f"{k}={v}" for k, v in r["changes"].items()) or "-"
        curve = " ".join(f"{x:.1f}" for x in r["top1"])
        print(
            f"| {label} | {name} | {changes} | {seed} | {r['final']:.2f} | {r['best']:.2f} | {curve} "
            f"| {r['checkpoint']} |"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", action="append", help="LABEL=CHECKPOINT, repeatable (with --cached-only: LABEL, the cells' own)"
    )
    parser.add_argument("--variant", action="append", type=variant, help="NAME[=FIELD=VALUE,...], repeatable")
    parser.add_argument("--seed", type=int, help="default: 0, or with --cached-only every seed cached")
    parser.add_argument(
        "--data",
        default=str(SHARED_DATA),
        help="an ImageFolder tree with train/ and val/; default: ../shared/data/cifar10-subset beside the repository",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1, as the study's cells: fine-tunes side by side)"
    )
    parser.add_argument("--cached-only", action="store_true", help="fine-tune nothing: print the cells cached in OUT")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "cells"), help="the cache")
    args = parser.parse_args(argv)
    if args.cached_only:
        if any("=" in m for m in args.model or []):
            parser.error("--cached-only reads the cells by label, each naming its own checkpoint: give --model LABEL")
        print_table(cached(args))
        return
    if not args.model or not args.variant:
        parser.error("give --model LABEL=CHECKPOINT and --variant NAME[=FIELD=VALUE,...] (or --cached-only)")
    if any("=" not in m for m in args.model):
        parser.error("--model takes LABEL=CHECKPOINT")
    if args.data == str(SHARED_DATA) and not SHARED_DATA.is_dir():  # never another data set in its place
        parser.exit(
            2, f"{parser.prog}: the default data {SHARED_DATA} is missing; give --data a folder with train/ and val/\n"
        )
    args.seed = 0 if args.seed is None else args.seed
    models = [m.split("=", 1) for m in args.model]
    for label, checkpoint in models:  # before any fine-tune: each takes minutes
        if not Path(checkpoint).is_file():
            parser.exit(
                1,
                f"{parser.prog}: no checkpoint {checkpoint} (--model {label}); pretrain it first, or give "
                "--cached-only to print the cells already cached\n",
            )
    rows = [
        (label, name, args.seed, measured(label, checkpoint, name, changes, args))
        for label, checkpoint in models
        for name, changes in args.variant
    ]
    print_table(rows)


if __name__ == "__main__":
    main()
