"""Step time and peak memory of the energy method against a supervised step, all in one run.

    python benchmarks/throughput.py --backbone vit_tiny --size 32 --batch 32 --repeats 5
    python benchmarks/throughput.py --backbone vit_small --size 224 --batch 64 --device cuda --compile inductor
    python benchmarks/throughput.py --only "energy N=2 exact (*" --only "energy N=2 finite-difference" \
        --only "AE baseline (*" --only "*compile*" --compile inductor --repeats 5 --threads 1

The paper's settings on one GPU (224 px, its batch of 32 per GPU), one table each:

    for b in vit_small vit_base swin_t convnext_t resnet50; do
        python benchmarks/throughput.py --backbone $b --size 224 --batch 32 --device cuda --repeats 10; done

Or all of them in one command (under ten minutes on one H100): at 224 px, at the paper's batch of 32 and at 128, the
rows of PAPER_ROWS (supervised, and the exact step with autograd's and with the rewritten convolution double backward,
finite differences; bf16 autocast as the package runs on CUDA):

    python benchmarks/throughput.py --device cuda --paper-sizes

Every row is float32 unless its name says bf16 autocast; the bf16 / fp32 lines below the table pair them.

Rows are timed interleaved (one step of each row, then again, `repeats` times; the median is shown),
so load from other processes hits all rows alike. Peak memory is measured in a separate pass, at the
batch and at half of it; the slope gives memory per image and the largest batch that fits in
--fit-gib GiB beside the weights, their gradients and AdamW's two moments (an estimate, not a run).
With --compile each compiled row also prints its compile time and the steps that repay it.
Each row also gets its FLOPs per step (torch.utils.flop_counter, depthwise convolutions' backward corrected) and
"x its FLOP bound", (its time / supervised time) / (its FLOPs / supervised FLOPs); `--profile` adds a torch.profiler
summary of one supervised and one exact energy step, split into forward / 1st backward / 2nd backward / optimizer
(benchmarks/step_flops.py):

    python benchmarks/throughput.py --backbone convnext_atto --threads 1 --only "supervised (*" \
        --only "energy N=2 exact (*" --profile

Target: the project's energy step (Pretrainer.train_step, exact, N = 2) at most 1.05x the bare loop
of the paper's pseudo code (appendix "Pseudo Code in PyTorch Style") on the same model.
"""

import argparse
import multiprocessing
import statistics
import sys
import tempfile

import torch
from corruption import timed
from peak_memory import mmap_pinned, peak_bytes
from step_flops import BWD1, BWD2, FWD, depthwise_check, profile_step, step_flops
from throughput_rows import (
    AUTOGRAD,
    BARE,
    BF16_PAIRS,
    COMPILED_PAIRS,
    ENERGY,
    PAPER_BACKBONES,
    PAPER_ROWS,
    REWRITTEN,
    SUPERVISED,
    rows,
)

import pretexts
from pretexts.engine.training.arithmetic import use_cuda_arithmetic
from pretexts.errors import ParameterError

TARGET = 1.05
MIN_SLOPE_BYTES = 4 * 2**20


def break_even(compiled: str, eager_s: float, compiled_s: float, warmup: dict) -> str:
    """The compile's price: the compiled row's two warm-up steps less two of its timed steps (the compile alone; the
    warm-up runs with the memory pass's allocator setting, which slows eager steps 2x, so it is not compared with
    the eager row's), and the steps the compiled row takes to repay it. A row that compiled nothing (a BatchNorm
    backbone's restoration step runs eagerly) costs noise, at most 0: no negative time, no negative steps."""
    cost = max(warmup[compiled] - 2 * compiled_s, 0.0)
    line = f"  compile time {cost:.1f} s; "
    if compiled_s >= eager_s:
        return line + "never repaid (no faster per step)"
    return line + f"repaid after {cost / (eager_s - compiled_s):.0f} steps"


def resident_bytes(model) -> int:
    """Weights, gradients and AdamW's two moments: what stays allocated between steps."""
    return 0 if model is None else 4 * sum(p.numel() * p.element_size() for p in model.parameters())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", nargs="+", default=["vit_tiny"], help="one table each")
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--batch", type=int, nargs="+", default=[32], help="one table each")
    parser.add_argument(
        "--paper-sizes",
        action="store_true",
        help=f"the GPU table: {', '.join(PAPER_BACKBONES)} at 224 px, batch 32 and 128, 3 repeats, the rows of "
        "PAPER_ROWS (unless --only is given)",
    )
    parser.add_argument("--task", default="colorization", help="a pixel task (the bare loop moves pixels)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--compile",
        default=None,
        help="also time the energy steps (exact, finite-difference) and the AE "
        "compiled with this torch.compile backend (e.g. inductor)",
    )
    parser.add_argument(
        "--tf32",
        choices=("on", "off"),
        default="on",
        help="CUDA only: float32 matmuls and convolutions in TF32 for every row (the package's default on CUDA)",
    )
    parser.add_argument("--fit-gib", type=float, default=80.0, help="memory budget for the largest-batch estimate")
    parser.add_argument("--only", action="append", help="wildcard over row names (repeat for several)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (1 is steadiest on a shared machine)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help=f"also print a torch.profiler summary of one step of the rows {SUPERVISED!r} and {ENERGY!r}",
    )
    args = parser.parse_args(argv)
    if args.paper_sizes:
        args.backbone, args.size, args.batch, args.repeats = PAPER_BACKBONES, 224, [32, 128], 3
        args.only = args.only or list(PAPER_ROWS)
    tables = [
        argparse.Namespace(**{**vars(args), "backbone": backbone, "batch": batch})
        for backbone in args.backbone
        for batch in args.batch
    ]
    if len(tables) == 1:
        measure_table(tables[0])
        return
    spawn = multiprocessing.get_context("spawn")
    for one in tables:  # each in a fresh process: one table's freed heap would hide the next one's peak memory
        child = spawn.Process(target=measure_table, args=(one,))
        child.start()
        child.join()


def measure_table(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as args.out:  # trainers need a folder; train_step writes nothing there
        measure(args)
    print(flush=True)


def measure(args) -> None:
    device = torch.device(args.device)
    use_cuda_arithmetic(device, args.tf32 == "on", cudnn_benchmark=True)  # the supervised rows too, as a run would
    task = pretexts.create_pretext(args.task)
    steps, models, skipped = {}, {}, {}
    for name, build in rows(args).items():
        try:
            steps[name], models[name] = build(args, device, task)
        except ParameterError as err:
            skipped[name] = str(err)
    torch.manual_seed(0)
    images = torch.rand(args.batch, 3, args.size, args.size, device=device)
    half = images[: max(1, args.batch // 2)]
    warmup, memory = {}, {}  # warm-up seconds (a compiled row's compile time is in them); peak bytes
    with mmap_pinned():  # the memory pass, never the timing: pinned, the eager energy step takes 2x (peak_memory.py)
        for name, step in list(steps.items()):  # warm-up: optimiser state, compilation, allocator
            print(f"warming up: {name}", file=sys.stderr, flush=True)
            try:
                warmup[name] = timed(lambda step=step: (step(images), step(images)), device)
            except torch.OutOfMemoryError:  # a large --batch: this row does not fit, the others still run
                skipped[name] = f"out of memory at batch {args.batch}"
                del steps[name], models[name]
                torch.cuda.empty_cache()
        for name, step in steps.items():  # a compiled row's half batch would compile it again: full batch only
            full = peak_bytes(lambda step=step: step(images), device)
            memory[name] = (full, None if "compile" in name else peak_bytes(lambda step=step: step(half), device))
    times = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():
            times[name].append(timed(lambda step=step: step(images), device))
    flops = {  # compiled rows: flop_counter would count (or recompile) the traced graph, not what ran; n/a
        name: step_flops(step, images) for name, step in steps.items() if "compile" not in name
    }

    what = "CUDA max_memory_allocated" if device.type == "cuda" else "resident-set high-water mark (VmHWM)"
    print(
        f"{args.backbone} at {args.size} px, batch {args.batch}, task {args.task}, on {device} "
        f"({torch.get_num_threads()} threads), torch {torch.__version__}"
        f"{f', TF32 {args.tf32}' if device.type == 'cuda' else ''}; median of {args.repeats} interleaved "
        f"steps; peak memory of one step above the resting state: {what}"
    )
    reference = SUPERVISED if SUPERVISED in times else next(iter(times))
    base = statistics.median(times[reference])
    base_flops = flops.get(reference, (0, {}))[0]
    print(
        f"| step | ms | x {reference.split(' (')[0]} | peak MiB | MiB / image | "
        f"est. max batch in {args.fit_gib:g} GiB | GFLOP / step | x its FLOP bound |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, samples in times.items():
        ms = statistics.median(samples)
        full, part = memory[name]
        cells = ["n/a"] * 3 if full is None else [f"{full / 2**20:.0f}", "n/a", "n/a"]
        if full is not None and part is not None and full - part >= MIN_SLOPE_BYTES:  # else noise, not a slope
            per_image = (full - part) / (args.batch - len(half))
            fit = (args.fit_gib * 2**30 - resident_bytes(models[name]) - (full - per_image * args.batch)) / per_image
            cells[1:] = [f"{per_image / 2**20:.2f}", f"{int(fit):,}" if models[name] else "-"]
        count = flops.get(name, (0, {}))[0]
        cells += (
            [f"{count / 1e9:.2f}", f"{(ms / base) / (count / base_flops):.2f}"] if count and base_flops else ["n/a"] * 2
        )
        print(f"| {name} | {ms * 1e3:.1f} | {ms / base:.2f} | " + " | ".join(cells) + " |", flush=True)
    for name, why in skipped.items():
        print(f"| {name} | skipped: {why} | | | | | | |")
    print(
        f"\nGFLOP / step: torch.utils.flop_counter over one step (forward, backward, the double backward where the "
        f"row has one). x its FLOP bound = (ms / {reference} ms) / (its FLOPs / {reference} FLOPs): how many times "
        "its FLOP-proportional time the row takes (1.00 for the reference; compiled rows n/a). flop_counter "
        "counts depthwise convolution's backward high (weight gradient x channels): these counts divide that term "
        "by groups (benchmarks/step_flops.py). FLOPs are exact counts, times are noisy on a shared machine."
    )
    if SUPERVISED in models and (check := depthwise_check(models[SUPERVISED], images)):
        print(check)
    for name in (SUPERVISED, ENERGY):
        if name in flops and flops[name][0]:
            split, phases = flops[name][1], (FWD, BWD1, BWD2) if name == ENERGY else (FWD, BWD2)
            parts = [f"{p if name == ENERGY or p == FWD else 'backward'} {split.get(p, 0) / 1e9:.2f}" for p in phases]
            print(f"GFLOP by phase, {name}: " + ", ".join(parts))
    for eager in COMPILED_PAIRS:
        compiled = f"{eager} + compile ({args.compile})"
        if eager in times and compiled in times:
            ratio = statistics.median(times[compiled]) / statistics.median(times[eager])
            print(f"compiled / eager, {eager}: {ratio:.3f}")
            print(break_even(compiled, statistics.median(times[eager]), statistics.median(times[compiled]), warmup))
            if eager != SUPERVISED and (twin := f"{SUPERVISED} + compile ({args.compile})") in times:  # like with like
                over = statistics.median(times[compiled]) / statistics.median(times[twin])
                print(f"  x the compiled supervised step: {over:.2f}")
    for fp32, bf16 in BF16_PAIRS.items():
        if fp32 in times and bf16 in times:
            print(f"bf16 / fp32, {fp32}: {statistics.median(times[bf16]) / statistics.median(times[fp32]):.3f}")
    for precision in ("", " + bf16 autocast"):
        if AUTOGRAD + precision in times and REWRITTEN + precision in times:
            ratio = statistics.median(times[REWRITTEN + precision]) / statistics.median(times[AUTOGRAD + precision])
            print(f"rewritten / autograd's double backward{precision or ' (fp32)'}: {ratio:.3f}")
    if ENERGY in times and BARE in times:
        ratio = statistics.median(times[ENERGY]) / statistics.median(times[BARE])
        print(f"\n{ENERGY} / {BARE}: {ratio:.3f} (target <= {TARGET}): {'ok' if ratio <= TARGET else 'MISSED'}")
    for name in (SUPERVISED, ENERGY) if args.profile else ():  # the supervised step's only backward reads "2nd"
        if name in steps:
            print(f"\ntorch.profiler, one step of {name} ({torch.get_num_threads()} threads):\n")
            print(profile_step(steps[name], images, flops.get(name)))


if __name__ == "__main__":
    main()
