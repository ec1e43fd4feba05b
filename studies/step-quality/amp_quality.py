"""bf16 autocast against float32 on the CPU: held-out restoration error after the same short pretraining.

    python studies/step-quality/amp_quality.py --backbone convnext_atto --steps 200 --batch-size 16 --seeds 0 1 \
        --threads 1

Each seed trains once per precision from the same weights on the same images and corruptions (the embedded
sample, 32 px); runs alternate precision so load from other processes hits both alike. bf16 keeps the
results when its held-out restored / corrupted MSE differs from float32's by less than the seeds' spread.
"""

import argparse
import statistics
import tempfile
import time

import torch

from pretexts.engine import PretrainConfig, Pretrainer


def train(args, amp: str, seed: int) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as out:
        cfg = PretrainConfig(
            backbone=args.backbone,
            task=args.task,
            data="sample",
            img_size=args.img_size,
            batch_size=args.batch_size,
            epochs=args.epochs,
            max_steps_per_epoch=args.steps,
            warmup_epochs=0.5,
            amp=amp,
            monitor_every=0,
            workers=0,
            seed=seed,
            out=out,
            quiet=True,
            device="cpu",
        )
        trainer = Pretrainer(cfg)
        trainer.figure = lambda path: None
        start = time.time()
        results = trainer.run()
        return results, time.time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="convnext_atto")
    parser.add_argument("--task", default="colorization")
    parser.add_argument("--img-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=200, help="optimiser steps in all (split over epochs)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    per_epoch = 320 // args.batch_size  # the embedded sample's 320 training images
    args.epochs, args.steps = -(-args.steps // per_epoch), min(args.steps, per_epoch)
    print(
        f"{args.backbone} at {args.img_size} px, batch {args.batch_size}, {args.epochs * args.steps} steps, "
        f"{args.task}, torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"native bf16 (oneDNN): {torch.ops.mkldnn._is_mkldnn_bf16_supported()}, {args.threads} thread(s)"
    )
    print("| amp | seed | s | held-out corrupted MSE | restored (last step) MSE | restored / corrupted |")
    print("|---|---|---|---|---|---|")
    ratios = {"off": [], "bf16": []}
    for seed in args.seeds:
        for amp in ("off", "bf16"):
            results, seconds = train(args, amp, seed)
            held = results["held_out"]
            corrupted, restored = held["corrupted_mse"], held["restored_mse"][-1]
            ratios[amp].append(restored / corrupted)
            print(
                f"| {amp} | {seed} | {seconds:.0f} | {corrupted:.5f} | {restored:.5f} | {restored / corrupted:.4f} |",
                flush=True,
            )
    for amp, values in ratios.items():
        spread = statistics.stdev(values) if len(values) > 1 else float("nan")
        print(f"{amp}: restored / corrupted mean {statistics.mean(values):.4f}, seed std {spread:.4f}")
    gaps = [b - a for a, b in zip(ratios["off"], ratios["bf16"])]
    print(f"bf16 - float32 per seed: {', '.join(f'{g:+.4f}' for g in gaps)}")


if __name__ == "__main__":
    main()
