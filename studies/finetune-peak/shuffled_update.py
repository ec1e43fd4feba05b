"""Is what pretraining wrote into a backbone structure, or drift? The same update with its structure taken out.

Rebuilds the run's weights before its first step (a `Pretrainer` from the checkpoint's own config and seed, as the
study's random-init row does), prints how far each block moved from them (the update's norm over the weights'),
and writes a control checkpoint: the initial weights plus the run's update with its elements shuffled within each
tensor, so every tensor moved exactly as far, in no learned direction. Fine-tune both
(finetune_sensitivity.py): what the control keeps of the run's fine-tuned score is what the update's
size alone gives, or takes. Asserts nothing.

    python studies/finetune-peak/shuffled_update.py --checkpoint runs/energy/checkpoint.pt --out runs/energy-shuffled.pt
"""

import argparse
import tempfile
from pathlib import Path

import torch

from pretexts.engine.training.checkpoint import load_checkpoint, save_checkpoint
from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.loop import Pretrainer


def initial_state(ckpt: dict) -> dict:
    """The model's state before the run's first step: its config and seed, built again."""
    with tempfile.TemporaryDirectory() as out:
        cfg = PretrainConfig.from_dict({**ckpt["config"], "out": out, "resume": None, "force": True, "quiet": True})
        return {k: v.detach().clone() for k, v in Pretrainer(cfg).model.state_dict().items()}


def shuffled(init: dict, trained: dict, seed: int) -> dict:
    """init + each float tensor's update (trained - init) with its elements permuted."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for key, value in trained.items():
        update = (value - init[key]).flatten() if value.is_floating_point() else None
        if update is None or not update.any():
            out[key] = value
            continue
        order = torch.randperm(update.numel(), generator=generator)
        out[key] = init[key] + update[order].view_as(value)
    return out


def moved(init: dict, trained: dict) -> list[tuple[str, float]]:
    """(part, |update| / |initial weights|) for the patch embedding, each block and the final norm."""
    blocks = sorted({int(k.split(".")[2]) for k in trained if k.startswith("backbone.blocks.")})
    parts = ["backbone.patch_embed.", *(f"backbone.blocks.{i}." for i in blocks), "backbone.norm."]
    rows = []
    for part in parts:
        keys = [k for k in trained if k.startswith(part) and trained[k].is_floating_point()]
        if keys:
            change = sum((trained[k] - init[k]).float().norm() ** 2 for k in keys) ** 0.5
            size = sum(init[k].float().norm() ** 2 for k in keys) ** 0.5
            rows.append((part.removeprefix("backbone.").rstrip("."), (change / size).item()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a pretraining checkpoint.pt")
    parser.add_argument("--out", required=True, help="where to write the control checkpoint")
    parser.add_argument("--seed", type=int, default=0, help="of the shuffle")
    args = parser.parse_args()
    ckpt = load_checkpoint(args.checkpoint, kinds=("pretrain",))
    init = initial_state(ckpt)
    print("| part | update / initial weights |\n|---|---|")
    for part, ratio in moved(init, ckpt["model"]):
        print(f"| {part} | {ratio:.4f} |")
    control = shuffled(init, ckpt["model"], args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint({**ckpt, "model": control}, args.out)
    print(f"wrote {args.out}: the initial weights plus the shuffled update (step {ckpt['global_step']})")


if __name__ == "__main__":
    main()
