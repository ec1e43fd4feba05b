"""Data-parallel overhead of `finetune` under torchrun: K ranks against one rank doing one rank's share.

    python benchmarks/torchrun_scaling.py --data ../shared/data/cifar10-subset --processes 2 --batch 64 --steps 20

Each of K ranks takes batch / K images a step, so K ranks on the global batch should take the wall time of
one process on batch / K for the same steps; the ratio is what the gradient all-reduce and the split validation
cost (target <= 1.1 for 2 ranks on gloo). The arms alternate `--repeats` times and the table gives the median, so
load from other processes hits both alike; each rank gets one thread (OMP_NUM_THREADS=1), so give the machine
as many free cores as ranks. The seconds are the run's own (results.json: training and validation, not start-up).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET = 1.1


def finetune_seconds(processes: int, batch: int, args, out: Path) -> float:
    runner = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)]
        if processes > 1
        else [sys.executable]
    )
    command = [
        *runner,
        "-m",
        "pretexts",
        "finetune",
        "--from-scratch",
        f"--backbone={args.backbone}",
        f"--data={args.data}",
        f"--batch-size={batch}",
        "--epochs=1",
        f"--max-steps-per-epoch={args.steps}",
        "--workers=0",
        "--quiet",
        f"--out={out}",
        "--force",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode:
        sys.exit(done.stderr[-2000:])
    return json.loads((out / "results.json").read_text())["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="sample")
    parser.add_argument("--backbone", default="convnext_atto")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="the global batch of the K ranks")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    share = args.batch // args.processes
    times = {"one": [], "ranks": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            times["one"].append(finetune_seconds(1, share, args, Path(folder) / "one"))
            times["ranks"].append(finetune_seconds(args.processes, args.batch, args, Path(folder) / "ranks"))
    one, ranks = statistics.median(times["one"]), statistics.median(times["ranks"])
    print(f"| run | batch per process | steps | seconds (median of {args.repeats}) |")
    print("|---|---|---|---|")
    print(f"| 1 process | {share} | {args.steps} | {one:.1f} |")
    print(f"| {args.processes} ranks (gloo) | {share} | {args.steps} | {ranks:.1f} |")
    verdict = "meets" if ranks / one <= TARGET else "misses"
    print(
        f"\n{args.processes} ranks / one process on one rank's share: {ranks / one:.2f}x ({verdict} the "
        f"target <= {TARGET}x; {args.backbone}, {os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
