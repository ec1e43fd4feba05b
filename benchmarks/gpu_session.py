"""A lent GPU's minutes spent on measurement alone: the machine, the CUDA tests, then the step-cost tables in order of
priority until the time is spent. Every output, and a summary of what ran and what did not fit, go into one folder.

    python benchmarks/gpu_session.py --minutes 8 --out benchmarks/results/gpu-h200-2026-11-29
    python benchmarks/gpu_session.py --dry-run --out /tmp/gpu-dry     # the same plan, tiny, on the CPU (a test)

The plan (PLAN), each table one `benchmarks/throughput.py` run at 224 px in bf16 autocast against the bf16
supervised step of the same run, in order of what is still unmeasured (the eager tables of every family have
been measured once with TF32 on, docs/results/gpu-h100.md; compiled steps and attention's second order have not):
1. the CUDA tests (`pytest -m cuda`);
2. one ViT-S/16 attention layer's second order at batch 128 by each way that exists
   (`benchmarks/attention_second_order.py`: math, math compiled, a fused forward with a differentiable backward,
   math recomputed under checkpointing, FlexAttention), with each way's peak memory;
3. the exact step compiled (inductor) beside it eager, batch 128, TF32 on: ViT-S/16, ConvNeXt-T, then ResNet-50
   (whose restoration step the package runs eagerly, BatchNorm's statistics being refused by torch.func: its table
   checks that on the GPU, at the cost of one eager table), Swin-T, ViT-B/16; the
   compile time and the steps that repay it printed. Only the exact step is compiled (not the supervised step):
   inductor's warm-up of it alone can take more than a minute and a half;
4. the eager tables (supervised fp32 and bf16, the exact step, finite differences): batch 128 with TF32 on, then
   ViT-S/16 and ConvNeXt-T with TF32 off (finite differences run float32 passes, which TF32 speeds), then batch 32.
Each table reports ms, x supervised, peak MiB, GFLOP per step and the fraction of its FLOP bound. An item runs with
the time left as its limit; one cut short is kept as far as it got, and what had no time left is listed as skipped.
"""

import argparse
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ROWS = (
    "supervised (CE, linear classifier)",
    "supervised + bf16 autocast",
    "energy N=2 exact + bf16 autocast",
    "energy N=2 finite-difference + bf16 autocast",
)
# the eager supervised row (no wildcard: not its compiled twin) and the exact step eager and compiled
COMPILED_ROWS = ("supervised + bf16 autocast", "energy N=2 exact + bf16 autocast*")
BACKBONES = ("vit_small", "convnext_t", "resnet50", "vit_base", "swin_t")
COMPILE_ORDER = ("vit_small", "convnext_t", "resnet50", "swin_t", "vit_base")


def table(name: str, backbone: str, batch: int, tf32: str = "on", compiled: bool = False) -> tuple[str, list[str]]:
    """(item name, throughput.py arguments) of one table."""
    rows = COMPILED_ROWS if compiled else ROWS
    argv = ["--backbone", backbone, "--batch", str(batch), "--size", "224", "--repeats", "3", "--tf32", tf32]
    argv += [arg for row in rows for arg in ("--only", row)]
    return name, argv + (["--compile", "inductor"] if compiled else [])


# one ViT-S/16 attention layer's second order, by the ways that exist (benchmarks/attention_second_order.py)
ATTENTION = ("attention-second-order", ["attention_second_order.py", "--batch", "128"])
ATTENTION_DRY = ["--device", "cpu", "--batch", "4", "--tokens", "65", "--dim", "192", "--heads", "3", "--dtype", "fp32"]
ATTENTION_DRY += ["--repeats", "1", "--compile-backend", "eager"]

PLAN = [
    ("cuda-tests", None),
    ATTENTION,
    *(table(f"{b}-128-compiled", b, 128, compiled=True) for b in COMPILE_ORDER),
    *(table(f"{b}-128", b, 128) for b in BACKBONES),
    *(table(f"{b}-128-no-tf32", b, 128, tf32="off") for b in ("vit_small", "convnext_t")),
    *(table(f"{b}-32", b, 32) for b in BACKBONES),
]


def dry(argv: list[str]) -> list[str]:
    """The same table at tiny sizes on the CPU: timm's test_vit at 32 px for the ViTs, test_resnet (BatchNorm) for
    ResNet-50, test_convnext for the rest, batch 4, one repeat, compiled with the eager backend (the code path, not
    the compiler)."""
    out = list(argv)
    backbone = out[out.index("--backbone") + 1]
    stand_ins = {"vit": "test_vit", "resnet": "test_resnet"}
    stand_in = next((small for prefix, small in stand_ins.items() if backbone.startswith(prefix)), "test_convnext")
    out[out.index("--backbone") + 1] = stand_in
    out[out.index("--batch") + 1], out[out.index("--size") + 1], out[out.index("--repeats") + 1] = "4", "32", "1"
    if "--compile" in out:
        out[out.index("--compile") + 1] = "eager"
    return out + ["--device", "cpu", "--threads", "1"]


def machine() -> str:
    """What ran: the GPU (nvidia-smi), torch, CUDA and cuDNN builds, timm and kornia, the CPU and Python."""
    import kornia
    import timm
    import torch

    lines = [
        f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"python {platform.python_version()}, {platform.platform()}, {platform.processor() or 'cpu'}",
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}",
        f"timm {timm.__version__}, kornia {kornia.__version__}",
    ]
    if torch.cuda.is_available():
        lines.append(f"GPU: {torch.cuda.get_device_name(0)}")
        try:
            smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
            lines += ["", smi]
        except (OSError, subprocess.TimeoutExpired) as err:
            lines.append(f"nvidia-smi: {err}")
    else:
        lines.append("GPU: none (a dry run on the CPU)")
    return "\n".join(lines) + "\n"


def run_item(name: str, argv: list[str] | None, out: Path, limit: float, dry_run: bool) -> tuple[str, float]:
    """Runs one item with `limit` seconds, its output into OUT/NAME.txt; (status, seconds taken)."""
    if argv is None:  # the CUDA tests; a dry run only collects them (they skip without a GPU)
        # only the files that hold CUDA tests: collecting the rest would import what a GPU image may lack
        files = sorted(
            str(f.relative_to(ROOT)) for f in (ROOT / "tests").glob("test_*.py") if "mark.cuda" in f.read_text()
        )
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "-n", "0", *files]
        command += ["--collect-only"] if dry_run else []
    elif argv[0].endswith(".py"):  # a script of its own (the attention layer's second order)
        command = [sys.executable, str(HERE / argv[0]), *(ATTENTION_DRY if dry_run else argv[1:])]
    else:
        command = [sys.executable, str(HERE / "throughput.py"), *(dry(argv) if dry_run else argv)]
    start = time.time()
    with (out / f"{name}.txt").open("w") as log:
        log.write("$ " + " ".join(command[1:]) + "\n\n")
        log.flush()
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            return f"cut short at {limit:.0f} s (the output so far is kept)", time.time() - start
    return ("done" if code == 0 else f"failed (exit {code})"), time.time() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the folder for the machine, each table and summary.md")
    parser.add_argument("--minutes", type=float, default=8.0, help="the whole session's budget")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU: checks the plan runs")
    parser.add_argument("--only", nargs="+", help="run only these items of the plan (names as in summary.md)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "machine.txt").write_text(machine())
    deadline = time.time() + args.minutes * 60
    plan = [(n, a) for n, a in PLAN if not args.only or n in args.only]
    summary = ["| item | status | seconds |", "|---|---|---|"]
    for name, item_argv in plan:
        left = deadline - time.time()
        if left < 20:  # too little to load a model and time a step
            summary.append(f"| {name} | skipped: no time left | 0 |")
            continue
        status, seconds = run_item(name, item_argv, out, left, args.dry_run)
        summary.append(f"| {name} | {status} | {seconds:.0f} |")
        print(f"{name}: {status} ({seconds:.0f} s)", flush=True)
    text = f"# GPU session{' (dry run on the CPU)' if args.dry_run else ''}\n\n" + "\n".join(summary) + "\n"
    (out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
