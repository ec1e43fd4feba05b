"""Does a recipe's faster start cost downstream accuracy? Equal optimiser steps, frozen-feature kNN and linear probe.

    python studies/learning-speed/recipe_downstream.py --data /path/to/cifar10-subset --task random-mask --steps 200 \
        --seeds 0,1

For each recipe (engine/training/recipes.py) and seed: pretrain for the same number of optimiser steps on the
same data, then `engine.run_probe` on the frozen backbone (kNN top-1 with k=20, linear probe top-1).
Prints one row per run and the mean per recipe; asserts nothing.
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from pretexts.engine import PretrainConfig, ProbeConfig, pretrain, run_probe


def measure(recipe: str, seed: int, args) -> dict:
    with tempfile.TemporaryDirectory() as out:
        epochs = max(1, args.steps // args.steps_per_epoch)
        cfg = PretrainConfig(
            recipe=recipe,
            task=args.task,
            backbone=args.backbone,
            data=args.data,
            img_size=args.img_size,
            batch_size=args.batch_size,
            epochs=epochs,
            max_steps_per_epoch=args.steps_per_epoch,
            seed=seed,
            workers=1,
            out=out,
            eval_images=256,
            figure_images=2,
        )
        results = pretrain(cfg)
        held = results["held_out"]
        probe = run_probe(
            ProbeConfig(
                checkpoint=str(Path(out, "checkpoint.pt")),
                data=args.data,
                probes=("knn", "linear"),
                probe_args={"knn_k": (20,)},
                seed=seed,
                workers=1,
                out=str(Path(out, "probe")),
            ),
            echo=lambda line: None,
        )
    return {
        "recipe": recipe,
        "seed": seed,
        "steps": results["optimizer_steps"],
        "ratio": held["restored_mse"][-1] / held["corrupted_mse"],
        "knn": probe["knn"]["k=20"],
        "linear": probe["linear"]["top1"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an ImageFolder tree with train/ and val/ (labelled)")
    parser.add_argument("--task", default="random-mask")
    parser.add_argument("--backbone", default="convnext_atto")
    parser.add_argument("--img-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200, help="optimiser steps per run")
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--recipes", default="paper,fast")
    parser.add_argument("--seeds", default="0,1")
    args = parser.parse_args()
    print(f"{args.task} on {args.backbone}, {args.steps} steps of batch {args.batch_size} on {args.data}")
    print("| recipe | seed | steps | held-out restored/corrupted | kNN k=20 top-1 | linear probe top-1 |")
    print("|---|---|---|---|---|---|")
    rows = []
    for recipe in args.recipes.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            r = measure(recipe, seed, args)
            rows.append(r)
            print(
                f"| {recipe} | {seed} | {r['steps']} | {r['ratio']:.3f} | {r['knn']:.2f} | {r['linear']:.2f} |",
                flush=True,
            )
    for recipe in args.recipes.split(","):
        mine = [r for r in rows if r["recipe"] == recipe]
        for key in ("knn", "linear"):
            values = [r[key] for r in mine]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            print(f"{recipe} {key}: {statistics.mean(values):.2f} +- {spread:.2f} over {len(values)} seeds")


if __name__ == "__main__":
    main()
