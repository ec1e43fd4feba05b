"""Dense transfer at a small budget: energy-pretrained vs AE/MAE-pretrained vs from-scratch backbones,
same head and fine-tuning budget, on the generated shapes-on-CIFAR set. Prints an mIoU table.

    PYTHONPATH=. python studies/segmentation/segmentation.py --backbone vit_tiny --pretrain-epochs 2 --steps 150 \
        --seeds 0 1 2

Each seed pretrains every method anew (on the embedded sample, `pretexts train`'s default data) and
fine-tunes every initialisation with that seed; the table gives mean +- std over the seeds.

The paper's ADE20K table (ViT-B, UperNet; run here with MAE's and BEiT's 160k-iteration protocol) is the full-scale
version of this comparison.
"""

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.evaluation.segmentation.train import run


def pretrain(method: str, args, out: Path, seed: int) -> Path:
    folder = out / f"pre-{method}-seed{seed}"
    cmd = [
        sys.executable,
        "-m",
        "pretexts",
        "train",
        "--method",
        method,
        "--backbone",
        args.backbone,
        "--epochs",
        str(args.pretrain_epochs),
        "--out",
        str(folder),
        "--device",
        "cpu",
        "--force",
        "--quiet",
        "--seed",
        str(seed),
    ]
    if args.pretrain_steps:
        cmd += ["--max-steps-per-epoch", str(args.pretrain_steps)]
    subprocess.run(cmd, check=True)
    return folder / "checkpoint.pt"


def spread(values: list) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} +- {sd:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backbone", default="vit_tiny")
    p.add_argument("--methods", nargs="+", default=["energy", "ae"], help="pretraining methods (e.g. add mae)")
    p.add_argument("--pretrain-epochs", type=int, default=2)
    p.add_argument("--pretrain-steps", type=int, default=None, help="cap steps per pretraining epoch")
    p.add_argument("--steps", type=int, default=150, help="segmentation fine-tuning iterations")
    p.add_argument("--head", default="upernet")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--out", default="runs/bench-segmentation")
    args = p.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    data = write_generated(out / "data", n_train=128, n_val=32, size=32, seed=0)
    names = ["scratch", *args.methods]
    rows = {name: [] for name in names}
    for seed in args.seeds:
        for name in names:
            ckpt = None if name == "scratch" else str(pretrain(name, args, out, seed))
            cfg = SegmentConfig(
                data=str(data),
                out=str(out / f"seg-{name}-seed{seed}"),
                checkpoint=ckpt,
                backbone=args.backbone if ckpt is None else None,
                img_size=32 if ckpt is None else None,
                head=args.head,
                max_steps=args.steps,
                batch_size=16,
                lr=args.lr,
                drop_path=0.0,  # as the documented table was measured
                device="cpu",
                seed=seed,
            )
            r = run(cfg, log=lambda s: None)
            rows[name].append((r["miou_percent"], r["pixel_acc_percent"]))  # percentages
            print(
                f"seed {seed} {name}: mIoU {r['miou_percent']:.1f}%, pixel acc {r['pixel_acc_percent']:.1f}%",
                flush=True,
            )
    print(
        f"\n| backbone init ({args.backbone}, {args.head}, {args.steps} steps, {len(args.seeds)} seeds) | mIoU | "
        f"pixel acc |\n|---|---|---|"
    )
    for name, results in rows.items():
        print(f"| {name} | {spread([m for m, _ in results])} | {spread([a for _, a in results])} |")


if __name__ == "__main__":
    main()
