"""How much of an energy checkpoint's restoration of masked boxes is one colour shift per image.

    python studies/representation/restoration_shift.py CHECKPOINT [CHECKPOINT ...] --data DIR --images 512

A feature that knows only an image's mean colour can still lower the restoration error: the energy's gradient
then moves every masked pixel the same way, from the fill towards the image's colour. This splits each
checkpoint's restoration of its own masking task (seeded, on held-out images) into that shift and the rest:
over the masked pixels only, it prints the error of the corrupted input, of the restored one, of the corrupted
input moved by the restoration's mean change per image and channel (the shift alone), and of the box filled with
its true mean colour (the best any shift can do). "shift's share" is the part of the restoration's gain that the
shift alone gets; near 1 the energy restores colour, not structure. "structure's share" is how much of the error
left after the best shift the restoration removes: 0 for colour only, 1 for a perfect restoration.
Asserts nothing.
"""

import argparse

import torch

from pretexts.engine.data.datasets import build_source
from pretexts.engine.data.loader import AugmentedImages, held_out_batches, unaugmented_transform
from pretexts.engine.evaluation.from_checkpoint import load_energy_model, task_for
from pretexts.engine.methods.energy import EnergyMethod
from pretexts.engine.methods.energy.restore import restore


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, C, 1, 1]: the mean of `values` over each image's masked pixels."""
    weight = mask.unsqueeze(1).float()
    return (values * weight).sum((2, 3), keepdim=True) / weight.sum((2, 3), keepdim=True).clamp(min=1)


def split(model, task, images: torch.Tensor, steps: int, seed: int) -> dict:
    """Summed squared errors over the masked pixels of one batch, and their count."""
    sample = task(images, torch.Generator(images.device).manual_seed(seed))
    mask = sample.info["mask"]
    with torch.enable_grad():
        restored = restore(model, task, sample, steps, create_graph=False)[-1].detach()
    corrupted, target = sample.state, sample.target
    shifted = corrupted + masked_mean(restored - corrupted, mask)
    best = torch.where(mask.unsqueeze(1), masked_mean(target, mask), corrupted)
    inside = mask.unsqueeze(1).expand_as(target)
    return {
        name: ((x - target)[inside] ** 2).sum().item()
        for name, x in (("corrupted", corrupted), ("restored", restored), ("shift", shifted), ("best_shift", best))
    } | {"pixels": inside.sum().item()}


def measure(path: str, data: str | None, count: int, seed: int) -> dict:
    model, cfg = load_energy_model(path)
    task = task_for(cfg, model=model)
    source = build_source(data or cfg.data, "val", cfg.img_size, seed)
    images = AugmentedImages(source, unaugmented_transform(cfg.img_size), seed)
    totals: dict = {}
    steps = EnergyMethod.parse_args(cfg)["steps"]
    for i, batch in enumerate(held_out_batches(images, count, seed, torch.device("cpu"), workers=0)):
        for key, value in split(model, task, batch, steps, seed + i).items():
            totals[key] = totals.get(key, 0.0) + value
    mse = {k: v / totals["pixels"] for k, v in totals.items() if k != "pixels"}
    gain = mse["corrupted"] - mse["restored"]
    return {
        "backbone": cfg.backbone,
        **mse,
        "shift_share": (mse["corrupted"] - mse["shift"]) / gain if gain > 0 else float("nan"),
        "structure_share": (mse["best_shift"] - mse["restored"]) / mse["best_shift"],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", help="pretraining checkpoints of the energy method (masking tasks)")
    parser.add_argument("--data", default=None, help="a folder with val/ (default: each checkpoint's data)")
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        "| checkpoint | backbone | masked-pixel MSE: corrupted | restored | shift alone | best shift "
        "| shift's share of the gain | structure's share |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for path in args.checkpoints:
        r = measure(path, args.data, args.images, args.seed)
        print(
            f"| {path} | {r['backbone']} | {r['corrupted']:.5f} | {r['restored']:.5f} | {r['shift']:.5f} "
            f"| {r['best_shift']:.5f} | {r['shift_share']:.2f} | {r['structure_share']:+.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
