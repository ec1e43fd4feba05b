"""Does a pretraining run amplify last-bit rounding? Its first steps again on other arithmetic, loss by loss.

Takes a finished run's folder (its config.json and log.jsonl: the reference, e.g. a cell of the
representation study kept with --keep-checkpoints) and runs its first --steps steps again, each variant in its own
process: `threads=N` (torch threads) or `env=NAME=VALUE` (e.g. ATEN_CPU_CAPABILITY=avx2, the instruction set). A
variant's losses are compared with the reference's step by step; the table gives, per ten steps, the largest
relative difference and how many steps differ at all. Writes OUT/LABEL/VARIANT.json (committed). Asserts nothing.

    python studies/arithmetic/arithmetic_sensitivity.py --run runs/rerun/vit_tiny/energy-centred-sincos/seed2/run \\
        --label energy-centred-sincos --steps 60 --variant threads=2 --variant env=ATEN_CPU_CAPABILITY=avx2
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def losses(log: Path, steps: int) -> list[float]:
    """The first `steps` losses of a log.jsonl, in step order (a skipped step's null as NaN)."""
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    by_step = {r["step"]: float("nan") if r["loss"] is None else r["loss"] for r in rows if "loss" in r and "step" in r}
    return [by_step[s] for s in range(1, steps + 1)]


def run_steps(config: Path, steps: int, threads: int, out: Path) -> None:
    """In this process: the run of `config` for `steps` steps, its schedule as planned (a step budget, as a cell)."""
    import torch

    from pretexts.engine.compare.cells import BudgetedPretrainer
    from pretexts.engine.training.config import PretrainConfig

    torch.set_num_threads(threads)
    cfg = PretrainConfig.from_dict({**json.loads(config.read_text()), "out": str(out / "run"), "force": True})
    trainer = BudgetedPretrainer(cfg)
    trainer.start_clock([steps], out, "process", "steps")
    trainer.run()


def variant(text: str, steps: int, run: Path) -> dict:
    """Run one variant in a new process (an instruction set is chosen as torch starts) and read its losses."""
    kind, _, value = text.partition("=")
    env, threads = dict(os.environ), 1
    if kind == "threads":
        threads = int(value)
    elif kind == "env":
        name, _, setting = value.partition("=")
        env[name] = setting
    else:
        raise SystemExit(f"--variant {text!r}: give threads=N or env=NAME=VALUE")
    with tempfile.TemporaryDirectory() as out:
        one = [sys.executable, __file__, "--one", str(run / "config.json"), str(steps), str(threads), out]
        subprocess.run(one, env=env, check=True)
        found = losses(Path(out) / "run" / "log.jsonl", steps)
    return {"variant": text, "threads": threads, "losses": found}


def compare(reference: list[float], found: list[float]) -> list[dict]:
    """Per ten steps: the largest relative difference of the loss, and how many steps differ at all."""
    rows = []
    for start in range(0, len(reference), 10):
        pairs = list(zip(reference[start : start + 10], found[start : start + 10]))
        rel = [abs(a - b) / abs(a) for a, b in pairs]
        rows.append(
            {"steps": f"{start + 1}-{start + len(pairs)}", "max_rel": max(rel), "differ": sum(r > 0 for r in rel)}
        )
    return rows


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        config, steps, threads, out = sys.argv[2:6]
        return run_steps(Path(config), int(steps), int(threads), Path(out))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a finished run's folder: config.json and log.jsonl")
    parser.add_argument("--label", required=True, help="the results' folder name, e.g. the arm")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--variant", action="append", required=True, help="threads=N or env=NAME=VALUE")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    run = Path(args.run)
    reference = losses(run / "log.jsonl", args.steps)
    for text in args.variant:
        result = variant(text, args.steps, run)
        result.update(reference=str(run), reference_losses=reference, steps=args.steps)
        result["table"] = compare(reference, result["losses"])
        first = next((i + 1 for i, (a, b) in enumerate(zip(reference, result["losses"])) if a != b), None)
        result["first_differing_step"] = first
        path = Path(args.out) / args.label / f"{text.replace('=', '-')}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"\n{args.label}, {text} against {run} (first differing step: {first})")
        print("| steps | largest relative loss difference | steps that differ |\n|---|---|---|")
        for row in result["table"]:
            print(f"| {row['steps']} | {row['max_rel']:.1e} | {row['differ']} |")


if __name__ == "__main__":
    main()
