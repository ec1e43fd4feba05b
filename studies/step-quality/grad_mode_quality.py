"""Exact vs finite-difference gradients: held-out restoration error after the same optimiser steps.

    python studies/step-quality/grad_mode_quality.py --backbone convnext_atto --steps 120 --batch-size 32

Both modes start from the same weights and see the same images and corruptions in the same order;
the held-out error (seeded subset of the val split) is logged every --eval-every steps. A mode is
as good as the other when its curve matches; its time per step is in benchmarks/throughput.py.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from pretexts.engine import PretrainConfig, Pretrainer

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10-subset"
MODES = ("exact", "finite-difference")


def train(args, mode: str) -> tuple[list, float]:
    with tempfile.TemporaryDirectory() as out:
        cfg = PretrainConfig(
            backbone=args.backbone,
            task=args.task,
            data=args.data,
            img_size=args.img_size,
            batch_size=args.batch_size,
            recipe="paper",
            base_lr=args.base_lr,
            warmup_epochs=0.0,
            epochs=1,
            max_steps_per_epoch=args.steps,
            eval_every=args.eval_every,
            eval_images=args.eval_images,
            workers=1,
            seed=args.seed,
            out=out,
            method_args={"alpha_lr_scale": args.alpha_lr_scale, "grad_mode": mode},
        )
        trainer = Pretrainer(cfg)
        trainer.figure = lambda path: None
        start = time.time()
        results = trainer.run()
        seconds = time.time() - start
        rows = [json.loads(line) for line in Path(out, "log.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["held_out"]) for r in rows if "held_out" in r]
    if results["optimizer_steps"] % args.eval_every:
        evals.append((results["optimizer_steps"], results["held_out"]))
    return evals, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="convnext_atto", help="a smooth backbone (ViT, Swin, ConvNeXt)")
    parser.add_argument("--task", default="colorization")
    parser.add_argument("--data", default=str(SHARED_DATA) if SHARED_DATA.is_dir() else "sample")
    parser.add_argument("--img-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--eval-every", type=int, default=30)
    parser.add_argument("--eval-images", type=int, default=256)
    parser.add_argument("--base-lr", type=float, default=1e-3)
    parser.add_argument("--alpha-lr-scale", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    curves = {mode: train(args, mode) for mode in MODES}
    print(
        f"{args.task} on {args.backbone}, {args.img_size} px, batch {args.batch_size}, data {args.data}, "
        f"base lr {args.base_lr}, alpha lr x{args.alpha_lr_scale}; held-out restored / corrupted MSE "
        f"(last step) on {args.eval_images} images"
    )
    steps = [step for step, _ in curves[MODES[0]][0]]
    print("| grad mode | s | " + " | ".join(f"step {s}" for s in steps) + " |")
    print("|---|---|" + "---|" * len(steps))
    for mode, (evals, seconds) in curves.items():
        ratios = [h["restored_mse"][-1] / h["corrupted_mse"] for _, h in evals]
        print(f"| {mode} | {seconds:.0f} | " + " | ".join(f"{r:.4f}" for r in ratios) + " |")


if __name__ == "__main__":
    main()
