"""The exact energy step on a CPU that another process keeps busy, against the same step on a quiet one: how many
threads torch uses decides whether it keeps its speed.

    python benchmarks/shared_cpu.py                                  # convnext_atto (batch 32), swin_t (batch 16)
    python benchmarks/shared_cpu.py --backbones convnext_atto --repeats 5

Each configuration runs in a fresh process (OpenMP reads its environment once, when it starts): one thread; as many
threads as the CPUs the process may use (torch's default); the same with OMP_WAIT_POLICY=PASSIVE (waiting threads
sleep instead of spinning); and what `pretexts train` does (`use_available_cpus`: the CPUs it may use that no other
process keeps busy as it starts). Each is timed quiet, then beside one busy process that the benchmark starts and
stops itself (Python spinning, not pinned). Median of --repeats steps after two warm-up steps, 32 px, the package's
step (Pretrainer.train_step, N = 2).

Targets: beside the busy process, pretexts' choice within 1.2x of one thread's time under the same load; quiet,
within 5 % of torch's default."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BATCHES = {"convnext_atto": 32, "swin_t": 16}
CPUS = len(os.sched_getaffinity(0))
CONFIGS = {  # name -> the OpenMP environment of the process
    "1 thread": {"OMP_NUM_THREADS": "1"},
    "all CPUs (torch's default)": {"OMP_NUM_THREADS": str(CPUS)},
    "all CPUs, OMP_WAIT_POLICY=PASSIVE": {"OMP_NUM_THREADS": str(CPUS), "OMP_WAIT_POLICY": "PASSIVE"},
    "the CPUs no other process keeps busy (pretexts)": {},
}


def child(backbone: str, batch: int, repeats: int) -> None:
    """One configuration, in this process: prints the median step's seconds as JSON."""
    import torch
    from throughput_rows import trainer_row

    from pretexts.engine.training.threads import use_available_cpus

    use_available_cpus()  # as `pretexts train` starts: no-op where OMP_NUM_THREADS is set

    with tempfile.TemporaryDirectory() as out:
        args = argparse.Namespace(backbone=backbone, size=32, batch=batch, task="random-mask", out=out, tf32="on")
        step, _ = trainer_row(steps=2)(args, torch.device("cpu"), None)
        images = torch.rand(batch, 3, 32, 32)
        step(images), step(images)  # warm-up: optimiser state, allocator
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            step(images)
            times.append(time.perf_counter() - start)
    print(json.dumps({"seconds": statistics.median(times), "threads": torch.get_num_threads()}))


def timed(backbone: str, batch: int, repeats: int, openmp: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(openmp)
    command = [sys.executable, __file__, "--child", backbone, str(batch), str(repeats)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", nargs="+", default=list(BATCHES), choices=list(BATCHES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", nargs="+", choices=list(CONFIGS), help="these configurations (and 1 thread)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return
    print(f"{CPUS} CPUs this process may use; median of {args.repeats} steps; one busy process beside 'loaded'\n")
    print(
        "| backbone, batch | configuration | threads quiet / loaded | quiet ms | loaded ms | loaded / quiet "
        "| vs 1 thread loaded |"
    )
    print("|---|---|---|---|---|---|---|")
    for backbone in args.backbones:
        batch, results = BATCHES[backbone], {}
        for load in ("quiet", "loaded"):
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "loaded" else None
            try:
                for name, openmp in CONFIGS.items():
                    if args.only and name not in args.only and name != "1 thread":
                        continue
                    results[name, load] = timed(backbone, batch, args.repeats, openmp)
            finally:
                if busy:
                    busy.kill()
                    busy.wait()
        one = results["1 thread", "loaded"]["seconds"]
        for name in [n for n in CONFIGS if (n, "quiet") in results]:
            quiet, loaded = results[name, "quiet"], results[name, "loaded"]
            print(
                f"| {backbone}, {batch} | {name} | {quiet['threads']} / {loaded['threads']} | "
                f"{quiet['seconds'] * 1e3:.0f} | "
                f"{loaded['seconds'] * 1e3:.0f} | {loaded['seconds'] / quiet['seconds']:.2f} | "
                f"{loaded['seconds'] / one:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
