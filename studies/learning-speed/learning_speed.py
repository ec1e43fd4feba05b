"""Optimiser steps from a random start until restored images beat the corrupted ones on held-out images.

    python studies/learning-speed/learning_speed.py --task random-mask --max-steps 200 --eval-every 50 \
        --settings paper,fast
    python studies/learning-speed/learning_speed.py --task denoising --task-arg gamma_low=0.5 --settings lr10-alpha400

Each setting overrides the paper's recipe (Table A), or names another recipe (engine/training/recipes.py).
Runs each setting for the same number of optimiser steps, no warm-up, lr all but constant (a cosine over 1000 epochs)
(or a wall-clock budget) on the same data, logging the held-out restoration error every few steps,
and prints one table. Steps, not seconds, are the measure: they do not depend on a noisy machine.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from pretexts.engine import PretrainConfig, Pretrainer
from pretexts.engine.training.config import with_method_args

# overrides of the paper's recipe (Table A), or another recipe
SETTINGS = {
    "paper": {},
    "fast": {"recipe": "fast"},
    "lr10": {"base_lr": 1e-3},
    "lr10-alpha10": {"base_lr": 1e-3, "alpha_lr_scale": 10.0},
    "lr10-energy10": {"base_lr": 1e-3, "energy_scale": 10.0},
    "lr40": {"base_lr": 4e-3},
    "lr40-alpha10": {"base_lr": 4e-3, "alpha_lr_scale": 10.0},
    "alpha100-smallhead": {"alpha_lr_scale": 100.0, "head_init_std": 0.003},
    "lr10-alpha100": {"base_lr": 1e-3, "alpha_lr_scale": 100.0},
    "lr10-alpha400": {"base_lr": 1e-3, "alpha_lr_scale": 400.0},
    "lr10-alpha100-alpha1": {"base_lr": 1e-3, "alpha_lr_scale": 100.0, "alpha": 1.0},
    "lr10-alpha100-energy10": {"base_lr": 1e-3, "alpha_lr_scale": 100.0, "energy_scale": 10.0},
    "lr10-alpha10-bs32": {"base_lr": 1e-3, "alpha_lr_scale": 10.0, "batch_size": 32},
    "lr10-alpha10-wd0": {"base_lr": 1e-3, "alpha_lr_scale": 10.0, "weight_decay": 0.0},
    "lr10-alpha10-n1": {"base_lr": 1e-3, "alpha_lr_scale": 10.0, "steps": 1},
    "lr10-alpha10-alpha1": {"base_lr": 1e-3, "alpha_lr_scale": 10.0, "alpha": 1.0},
    "lr10-alpha10-betas99": {"base_lr": 1e-3, "alpha_lr_scale": 10.0, "betas": (0.9, 0.999)},
}


class Budgeted(Pretrainer):
    """Stops after `budget` seconds or `max_steps` optimiser steps, whichever comes first."""

    def __init__(self, cfg, budget: float, max_steps: int):
        super().__init__(cfg)
        self.deadline, self.max_steps = time.time() + budget, max_steps

    def train_step(self, images):
        if time.time() > self.deadline or self.global_step >= self.max_steps:
            self.steps_per_epoch = self.batch  # ends this epoch; run() then ends the loop
            self.cfg.epochs = self.epoch + 1
            return {"loss": float("nan"), "alpha": self.model.alpha.item(), "lr": 0.0}
        return super().train_step(images)


def measure(name: str, overrides: dict, args) -> dict:
    with tempfile.TemporaryDirectory() as out:
        settings = {
            "task": args.task,
            "task_args": args.task_args,
            "backbone": args.backbone,
            "batch_size": args.batch_size,
            "recipe": "paper",
            **overrides,
        }
        # the energy method's options (alpha_lr_scale, steps, ...) among the settings go into method_args
        cfg = PretrainConfig(
            **with_method_args(
                dict(
                    data=args.data,
                    img_size=args.img_size,
                    epochs=1000,
                    warmup_epochs=0.0,
                    eval_every=args.eval_every,
                    workers=1,
                    out=out,
                    seed=args.seed,
                    eval_images=args.eval_images,
                    **settings,
                )
            )
        )
        trainer = Budgeted(cfg, args.budget, args.max_steps)
        trainer.figure = lambda path: None
        start = time.time()
        trainer.run()
        rows = [json.loads(line) for line in Path(out, "log.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["held_out"]) for r in rows if "held_out" in r]
    first = next(
        (
            s
            for s, h in evals
            if None not in (h["restored_mse"][-1], h["corrupted_mse"]) and h["restored_mse"][-1] < h["corrupted_mse"]
        ),
        None,
    )  # null: a non-finite error
    last = evals[-1][1] if evals else None
    return {
        "setting": name,
        "steps": trainer.global_step,
        "seconds": time.time() - start,
        "first_win": first,
        "ratio": last["restored_mse"][-1] / last["corrupted_mse"] if last else float("nan"),
        "alpha": trainer.model.alpha.item(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="colorization")
    parser.add_argument("--task-arg", action="append", default=[], metavar="NAME=VALUE", help="a task parameter")
    parser.add_argument("--backbone", default="convnext_atto")
    parser.add_argument("--data", default="sample")
    parser.add_argument("--img-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=60, help="optimiser steps per setting")
    parser.add_argument("--budget", type=float, default=1800, help="at most this many seconds per setting")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-images", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help="comma-separated names from SETTINGS (paper: base lr 1e-4; lr10: 1e-3, ...)",
    )
    args = parser.parse_args()
    args.task_args = {k: v for k, v in (a.split("=", 1) for a in args.task_arg)}
    print(
        f"{args.task} {args.task_args or ''} on {args.backbone}, {args.img_size} px, batch {args.batch_size}, "
        f"data {args.data}, "
        f"{args.max_steps} steps per setting, held-out error every {args.eval_every} steps"
    )
    print("| setting | optimiser steps | s | first step restored < corrupted | final restored/corrupted | alpha |")
    print("|---|---|---|---|---|---|")
    for name in args.settings.split(","):
        r = measure(name, SETTINGS[name], args)
        print(
            f"| {r['setting']} | {r['steps']} | {r['seconds']:.0f} | {r['first_win'] or 'never'} | "
            f"{r['ratio']:.3f} | {r['alpha']:.4f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
