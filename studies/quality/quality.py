"""Top-1 after fine-tuning: energy pretraining vs the autoencoder baseline vs from scratch, in one time budget.

    python studies/quality/quality.py --budget 900 [--also-finite-difference]

Pretrains with the energy method (one task), then fine-tunes; pretrains the autoencoder baseline on the
same data, task and wall-clock budget, then the same fine-tune; fine-tunes from scratch with the same
recipe and epochs. Each stage plans its optimiser steps from a short timing run, so the whole fits the
budget. Prints the split, then one table. The paper's gain of pretraining for ViT-S is 3.1 points.
`--also-finite-difference` adds energy pretraining in that gradient mode, so both modes' top-1 compare.
Fine-tuning defaults to the small-data recipe (`--recipe small` of `pretexts finetune`: no RandAugment, mixup or
cutmix, base lr 4e-3, crops of at least 35 %): the paper's, made for 100 ImageNet epochs, drowns a few thousand
32 px images. The --ft-base-lr ... --crop-min-scale options below change one value of it.
"""

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import torch

from pretexts.engine import FinetuneConfig, Finetuner, PretrainConfig, Pretrainer
from pretexts.engine.data.loader import to_device
from pretexts.engine.evaluation.finetune import top1_accuracy
from pretexts.engine.evaluation.finetune_recipes import FINETUNE_RECIPES

SMALL = FINETUNE_RECIPES["small"]

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10-subset"


def with_deadline(trainer_cls):
    """The trainer, ending its run at `deadline` (a safety net: steps are planned to end before it)."""

    class Budgeted(trainer_cls):
        deadline = math.inf

        def train_step(self, images):
            if time.time() > self.deadline:
                self.steps_per_epoch, self.cfg.epochs = self.batch, self.epoch + 1  # ends the epoch and the run
                return {"loss": float("nan"), "lr": 0.0}
            return super().train_step(images)

    return Budgeted


def pretrain_config(args, method: str, out: str, **overrides) -> PretrainConfig:
    if method == "energy":  # its own options, over the run's defaults
        overrides = {
            "method_args": {
                "grad_mode": args.grad_mode,
                "alpha_lr_scale": args.alpha_lr_scale,
                **overrides.pop("method_args", {}),
            },
            **overrides,
        }
    return PretrainConfig(
        method=method,
        task=args.task,
        backbone=args.backbone,
        data=args.data,
        img_size=args.img_size,
        batch_size=args.batch_size,
        recipe="paper",
        base_lr=args.base_lr,
        workers=args.workers,
        seed=args.seed,
        out=out,
        eval_images=256,
        figure_images=8,
        **overrides,
    )


def time_pretraining(args, method: str, **overrides) -> tuple[float, int]:
    """(seconds per optimiser step, steps per epoch) of a throwaway trainer."""
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Pretrainer(pretrain_config(args, method, tmp, **overrides))
        images = to_device(torch.stack([trainer.train_set[(0, i)][0] for i in range(args.batch_size)]), trainer.device)
        trainer.train_step(images)  # the first step pays one-off costs
        start = time.time()
        for _ in range(3):
            trainer.train_step(images)
        return (time.time() - start) / 3, trainer.steps_per_epoch


def pretrain(args, method: str, budget: float, out: Path, **overrides) -> dict:
    start = time.time()
    per_step, per_epoch = time_pretraining(args, method, **overrides)
    steps = max(1, int((budget - (time.time() - start)) * 0.85 / per_step))  # 15 % for data, evaluation, figures
    epochs = math.ceil(steps / per_epoch)
    cfg = pretrain_config(
        args, method, str(out), epochs=epochs, max_steps_per_epoch=math.ceil(steps / epochs), **overrides
    )
    trainer = with_deadline(Pretrainer)(cfg)
    trainer.deadline = start + budget
    results = trainer.run()
    held = results["held_out"]
    return {
        "method": method,
        "seconds": time.time() - start,
        "steps": trainer.global_step,
        "epochs": trainer.epoch,
        "seconds_per_step": per_step,
        "restored_over_corrupted": held["restored_mse"][-1] / held["corrupted_mse"],
        "checkpoint": str(out / "checkpoint.pt"),
    }


def finetune_config(args, out: Path, **overrides) -> FinetuneConfig:
    return FinetuneConfig(
        data=args.data,
        recipe="small",
        batch_size=args.batch_size,
        base_lr=args.ft_base_lr,
        layer_decay=args.layer_decay,
        drop_path=args.drop_path,
        randaug=args.randaug,
        mixup=args.mixup,
        cutmix=args.cutmix,
        smoothing=args.smoothing,
        crop_min_scale=args.crop_min_scale,
        workers=args.workers,
        seed=args.seed,
        out=str(out),
        **overrides,
    )


def finetune_epochs(args, budget: float, out: Path) -> tuple[int, float]:
    """Epochs of the shared fine-tune that fit `budget` seconds, from timing 4- and 8-step epochs (their
    difference is the cost of a step, the rest the loader's start) and one evaluation."""
    timings = {}
    for steps in (4, 4, 8):  # the first run pays one-off costs
        cfg = finetune_config(
            args,
            out,
            from_scratch=True,
            backbone=args.backbone,
            img_size=args.img_size,
            epochs=1,
            max_steps_per_epoch=steps,
        )
        trainer = Finetuner(cfg, echo=lambda line: None)
        start = time.time()
        trainer.train_epoch()
        timings[steps] = time.time() - start
    per_step = (timings[8] - timings[4]) / 4
    start = time.time()
    top1_accuracy(trainer.model, trainer.val_loader(), trainer.device)
    per_epoch = len(trainer.train_set) // cfg.batch_size * per_step + timings[4] - 4 * per_step + time.time() - start
    return max(1, int(budget * 0.9 / per_epoch)), per_epoch


def finetune(args, epochs: int, out: Path, **source) -> dict:
    start = time.time()
    results = Finetuner(finetune_config(args, out, epochs=epochs, **source), echo=lambda line: None).run()
    return {**results, "seconds": time.time() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(SHARED_DATA) if SHARED_DATA.is_dir() else "sample")
    parser.add_argument("--budget", type=float, default=600, help="seconds for all stages together")
    parser.add_argument("--pretrain-share", type=float, default=0.2, help="of the budget, for each pretraining")
    parser.add_argument("--task", default="colorization")
    parser.add_argument("--backbone", default="convnext_atto")
    parser.add_argument("--img-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--base-lr", type=float, default=1e-3, help="pretraining, x batch / 256")
    parser.add_argument("--alpha-lr-scale", type=float, default=30.0)
    parser.add_argument("--grad-mode", default="exact", choices=("exact", "finite-difference"))
    parser.add_argument(
        "--also-finite-difference",
        action="store_true",
        help="add a row: energy pretraining in the finite-difference gradient mode",
    )
    parser.add_argument("--ft-base-lr", type=float, default=SMALL["base_lr"], help="fine-tuning, x batch / 256")
    parser.add_argument("--layer-decay", type=float, default=SMALL["layer_decay"])
    parser.add_argument("--drop-path", type=float, default=SMALL["drop_path"])
    parser.add_argument("--randaug", default=SMALL["randaug"])
    parser.add_argument("--mixup", type=float, default=SMALL["mixup"])
    parser.add_argument("--cutmix", type=float, default=SMALL["cutmix"])
    parser.add_argument("--smoothing", type=float, default=SMALL["smoothing"])
    parser.add_argument("--crop-min-scale", type=float, default=SMALL["crop_min_scale"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one is faster on a busy 2-core box)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/quality")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    begin = time.time()
    pre_budget = args.budget * args.pretrain_share
    pretrainings = 3 if args.also_finite_difference else 2
    ft_budget = (args.budget - pretrainings * pre_budget) / (pretrainings + 1)
    print(
        f"data {args.data}; {args.backbone} at {args.img_size} px, batch {args.batch_size}, task {args.task}; "
        f"{args.threads} thread(s)"
    )
    print(
        f"budget {args.budget:.0f} s: {pretrainings} pretrainings x {pre_budget:.0f} s + {pretrainings + 1} "
        f"fine-tunes x {ft_budget:.0f} s"
    )
    print(
        f"pretraining: base lr {args.base_lr:g}, alpha lr x{args.alpha_lr_scale:g}; fine-tuning: base lr "
        f"{args.ft_base_lr:g}, layer decay {args.layer_decay:g}, drop path {args.drop_path:g}, randaug "
        f"{args.randaug}, mixup {args.mixup:g}, cutmix {args.cutmix:g}, smoothing {args.smoothing:g}",
        flush=True,
    )
    epochs, per_epoch = finetune_epochs(args, ft_budget, out / "calibration")
    print(f"fine-tune: {epochs} epochs (~{per_epoch:.1f} s each)", flush=True)
    rows = []
    runs = [("energy", "energy", {}), ("ae", "ae", {})]
    if args.also_finite_difference:
        runs.insert(1, ("energy-fd", "energy", {"method_args": {"grad_mode": "finite-difference"}}))
    for name, method, overrides in runs:
        pre = pretrain(args, method, pre_budget, out / f"{name}_pretrain", **overrides)
        print(
            f"{name} pretraining: {pre['steps']} steps in {pre['seconds']:.0f} s, held-out restored/corrupted "
            f"{pre['restored_over_corrupted']:.3f}",
            flush=True,
        )
        rows.append((name, pre, finetune(args, epochs, out / f"{name}_finetune", checkpoint=pre["checkpoint"])))
    rows.append(
        (
            "scratch",
            None,
            finetune(
                args,
                epochs,
                out / "scratch_finetune",
                from_scratch=True,
                backbone=args.backbone,
                img_size=args.img_size,
            ),
        )
    )
    print("| pretraining | steps | s | restored/corrupted | fine-tune epochs | s | top-1 final | top-1 best |")
    print("|---|---|---|---|---|---|---|---|")
    for name, pre, ft in rows:
        cells = (
            [str(pre["steps"]), f"{pre['seconds']:.0f}", f"{pre['restored_over_corrupted']:.3f}"] if pre else ["-"] * 3
        )
        print(
            f"| {name} | {' | '.join(cells)} | {ft['epochs']} | {ft['seconds']:.0f} | {ft['final_top1']:.2f} | "
            f"{ft['best_top1']:.2f} |"
        )
    top1 = {name: ft["final_top1"] for name, _, ft in rows}
    print(
        f"energy - scratch: {top1['energy'] - top1['scratch']:+.2f} points (target >= +3); energy - AE: "
        f"{top1['energy'] - top1['ae']:+.2f} (target >= 0); total {time.time() - begin:.0f} s"
    )
    if "energy-fd" in top1:
        print(f"finite-difference - exact: {top1['energy-fd'] - top1['energy']:+.2f} points")
    summary = {"args": vars(args), "rows": [{"pretraining": n, "pretrain": p, "finetune": f} for n, p, f in rows]}
    (out / "quality.json").write_text(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
