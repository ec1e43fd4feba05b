"""Corruption time of each pretext task against one energy step of the same run.

    python benchmarks/corruption.py --batch 64 --size 32 --backbone vit_tiny --repeats 5

A step is what training does per batch besides data loading: restore with steps=1, the restoration
loss and its backward (double backward through dE/dx). Corruption and step are timed alternately
(median of `repeats`), so load from other processes hits both alike. Target: corruption under 5 %
of a step, so the corruption is never what a training run waits on.
"""

import argparse
import statistics
import time

import torch

import pretexts
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.energy.restore import restoration_loss, restore
from pretexts.engine.methods.states import state_adapter

TARGET = 0.05
# vit_tiny at 32 px has 4-pixel patches: the paper's k = 2 edge mask would blank them whole.
TASK_ARGS = {"patch-sorting": {"edge_max": 1}}


def timed(fn, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def measure(name, model, images, repeats) -> tuple[float, float]:
    """Median seconds of one corruption and of one energy step, timed alternately."""
    task = state_adapter(pretexts.create_pretext(name, **TASK_ARGS.get(name, {})), model).prepare()
    generator = torch.Generator(images.device).manual_seed(0)
    box = {}

    def corrupt():
        box["sample"] = task(images, generator)

    def step():
        model.zero_grad(set_to_none=True)
        sample = box["sample"]
        restoration_loss(restore(model, task, sample, steps=1), sample.target).backward()

    corrupt(), step()  # warm-up
    corrupt_times, step_times = [], []
    for _ in range(repeats):
        corrupt_times.append(timed(corrupt, images.device))
        step_times.append(timed(step, images.device))
    return statistics.median(corrupt_times), statistics.median(step_times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--backbone", default="vit_tiny")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tasks", default="*", help="wildcard over task names")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    torch.manual_seed(0)
    model = create_energy_model(args.backbone, img_size=args.size).to(device).train()
    images = torch.rand(args.batch, 3, args.size, args.size, device=device)
    print(
        f"{args.batch} x 3 x {args.size} x {args.size} on {device} ({torch.get_num_threads()} threads), "
        f"{args.backbone}, median of {args.repeats}; target: corruption < {TARGET:.0%} of a step"
    )
    print(f"{'task':<18} {'corrupt ms':>11} {'step ms':>9} {'ratio':>7}  target")
    for name in pretexts.list_pretexts(args.tasks):
        corrupt_s, step_s = measure(name, model, images, args.repeats)
        ratio = corrupt_s / step_s
        verdict = "ok" if ratio < TARGET else "MISSED"
        print(f"{name:<18} {corrupt_s * 1e3:>11.2f} {step_s * 1e3:>9.1f} {ratio:>7.2%}  {verdict}", flush=True)


if __name__ == "__main__":
    main()
