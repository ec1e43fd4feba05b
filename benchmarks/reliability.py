"""Reliability, re-measured: bad inputs refused in one line, malicious checkpoints refused before anything runs,
SIGKILLs survived and resumes equal to the run never stopped. Prints one table (docs/reliability.md).

    python benchmarks/reliability.py                 # all, about 10 minutes on 2 CPU cores
    python benchmarks/reliability.py --kills 3 --resumes 3
    python benchmarks/reliability.py --audit-only     # the audit's 12 cases, about 3 minutes

A bad input counts as refused cleanly when the command exits 2 with exactly one `Error:` line and no traceback.
A payload checkpoint is a real one with an object whose unpickling would write a marker file: it counts as
refused when the command exits 2 and the marker was never written. A kill is a SIGKILL at a random moment of
`pretexts train`, then `--resume` until done; a resume is a SIGTERM at a random moment, then `--resume`; each
counts as equal when the final weights are bit-identical to an uninterrupted run of the same command. The
audit's cases are the 12 failures an independent audit found: each counts as handled when the command
answers as the project asks (one `Error:` line and exit 2, or a run that goes on), within 5 minutes, losing no file.
"""

import argparse
import json
import tempfile
from pathlib import Path

import torch
from reliability_audit import audit_cases
from reliability_harness import ONE_STEP, clean_refusal, cli, fixtures
from reliability_resumes import kills_and_resumes


class Payload:
    """Unpickling it calls `Path(marker).touch()`: code run from a checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def bad_inputs(f: dict) -> list[list]:
    w = f["work"]
    train = [*ONE_STEP, "--data", f["data"]]
    out = ["--out", w / "bad-run"]
    return [
        [*train, *out, "--task", "colorisation"],
        [*train, *out, "--backbone", "resnet181"],
        [*train, *out, "--recipe", "papr"],
        [*train, *out, "--task", "super-resolution", "--task-arg", "scale=0"],
        [*train, *out, "--task", "super-resolution", "--task-arg", "scale=abc"],
        [*train, *out, "--task", "denoising", "--task-arg", "ratio=0.5"],
        [*train, *out, "--task", "random-mask", "--preset", "huge"],
        [*train, *out, "--task", "gridded-mask", "--task-arg", "grid=64"],
        [*train, *out, "--task", "patch-sorting"],
        [*train, *out, "--backbone", "vit_tiny", "--img-size", "30"],
        [*train, *out, "--img-size", "16"],
        [*train, *out, "--img-size", "100000"],
        [*train, *out, "--steps", "-1"],
        [*train, *out, "--lr", "0"],
        [*train, *out, "--lr", "-1e-3"],
        [*train, *out, "--lr", "inf"],
        [*train, *out, "--lr", "nan"],
        [*train, *out, "--lr", "1e4"],
        [*train, *out, "--base-lr", "5"],
        [*train, *out, "--batch-size", "-8"],
        [*train, *out, "--batch-size", "512"],
        [*train, *out, "--epochs", "0"],
        [*train, *out, "--epochs", "abc"],
        [*train, *out, "--max-steps-per-epoch", "0"],
        [*train, *out, "--clip-grad", "-1"],
        [*train, *out, "--warmup-epochs", "-1"],
        [*train, *out, "--device", "tpu0"],
        [*train, *out, "--betas", "2", "0.5"],
        [*train, *out, "--config", f["three_betas"]],
        [*train, *out, "--seed", "99999999999999999999999"],
        [*train, *out, "--seed", "-1"],
        [*train, *out, "--set", "betas=[0.9,"],
        [*train, *out, "--set", "nope=1"],
        [*train, *out, "--set", "epochs"],
        [*train, *out, "--eval-images", "0"],
        [*train, *out, "--figure-images", "0"],
        [*train, *out, "--amp", "fp8"],
        [*train, *out, "--loss", "l3"],
        [*train, *out, "--method", "maee"],
        [*train, *out, "--method", "mae", "--method-arg", "nope=1"],
        [*train, *out, "--epoch", "3"],
        [*train, *out, "--config", w / "missing.yaml"],
        [*ONE_STEP, *out, "--data", w / "nope"],
        [*ONE_STEP, *out, "--data", f["file"]],
        [*ONE_STEP, *out, "--data", f["cifar"]],
        [*train, "--out", f["file"]],
        [*train, "--out", f["pre"].parent],
        [*train, "--out", w / "bad-resume", "--resume"],
        [*train, "--out", w / "bad-resume2", "--resume", f["ft"]],
        [*train, "--out", w / "bad-resume3", "--resume", f["wrong_shapes"]],
        ["train", "--resume", "--out", f["pre"].parent, "--epochs", "2", "--batch-size", "16"],
        ["train", "--resume", "--out", f["pre"].parent, "--epochs", "2", "--seed", "5"],
        ["train", "--resume", "--out", f["pre"].parent, "--epochs", "2", "--data", "sample"],
        ["finetune", "--checkpoint", w / "missing.pt", "--out", w / "bad-ft"],
        ["finetune", "--checkpoint", f["wrong_shapes"], "--data", f["data"], "--out", w / "bad-ft"],
        ["finetune", "--checkpoint", f["pre"], "--data", f["data"], "--label-fraction", "2", "--out", w / "bad-ft"],
        ["finetune", "--checkpoint", f["pre"], "--data", f["data"], "--layer-decay", "0", "--out", w / "bad-ft"],
        ["finetune", "--from-scratch", "--backbone", "resnet18", "--data", f["loop"], "--out", w / "bad-ft"],
        ["probe", "--checkpoint", f["pre"], "--probe", "nope", "--out", w / "bad-probe"],
        ["probe", "--checkpoint", f["flipped"], "--out", w / "bad-probe"],
        ["probe", "--checkpoint", f["pre"], "--out", f["pre"].parent],
        ["restore", "--checkpoint", f["pre"], "--out", w / "x.pt"],
        ["restore", "--checkpoint", f["ft"], "--out", w / "x.png"],
        ["restore", "--checkpoint", f["pre"], "--images", "0", "--out", w / "x.png"],
        ["restore", "--checkpoint", f["pre"], "--out", f["pre"].parent / "results.png"],
        ["energy", "--checkpoint", f["ft"], "--out", w / "e.png"],
        ["energy", "--checkpoint", f["pre"], "--images", "0", "--out", w / "e.png"],
        ["export", "--checkpoint", f["pre"], "--out", f["pre"]],
        ["export", "--checkpoint", f["seg"], "--out", w / "ex"],
        ["export", "--checkpoint", f["empty_config"], "--out", w / "ex"],
        ["export", "--checkpoint", f["flipped"], "--out", w / "ex"],
        ["export", "--checkpoint", f["pre"], "--out", f["pre"].parent],
        ["segment", "--data", "generated", "--out", w / "bad-seg"],
        ["segment", "--from-scratch", "--backbone", "resnet18", "--data", f["data"], "--out", w / "bad-seg"],
        ["segment", "--checkpoint", f["pre"], "--data", "generated", "--out", f["seg"].parent],
        ["list", "--nope"],
        ["nope"],
    ]


def payload_refusals(f: dict) -> list[tuple[bool, str]]:
    """A real pretraining (or fine-tuning) checkpoint with a payload added, given to every command that reads one."""
    w = f["work"]
    rows = []
    for source, name in ((f["pre"], "pre-payload.pt"), (f["ft"], "ft-payload.pt")):
        ckpt = torch.load(source, weights_only=True)
        torch.save({**ckpt, "extra": Payload(w / f"{name}.ran")}, w / name)
    commands = [
        ["train", "--resume", w / "pre-payload.pt", "--out", w / "p-train"],
        ["finetune", "--checkpoint", w / "pre-payload.pt", "--data", f["data"], "--out", w / "p-ft"],
        ["finetune", "--resume", w / "ft-payload.pt", "--data", f["data"], "--out", w / "p-ft2"],
        ["probe", "--checkpoint", w / "pre-payload.pt", "--data", f["data"], "--out", w / "p-probe"],
        ["segment", "--checkpoint", w / "pre-payload.pt", "--data", "generated", "--out", w / "p-seg"],
        ["export", "--checkpoint", w / "pre-payload.pt", "--out", w / "p-export"],
        ["restore", "--checkpoint", w / "pre-payload.pt", "--out", w / "p-restore.png"],
        ["energy", "--checkpoint", w / "pre-payload.pt", "--out", w / "p-energy.png"],
    ]
    for args in commands:
        code, output = cli(args)
        ran = any((w / f"{n}.ran").exists() for n in ("pre-payload.pt", "ft-payload.pt"))
        rows.append((code == 2 and not ran, f"{args[0]}: exit {code}, payload {'RAN' if ran else 'not run'}"))
        for n in ("pre-payload.pt", "ft-payload.pt"):
            (w / f"{n}.ran").unlink(missing_ok=True)
    return rows


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--resumes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="Print each bad input's answer.")
    parser.add_argument("--audit-only", action="store_true", help="Only the audit's 12 cases.")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        f = fixtures(work)
        refused = []
        for case in [] if args.audit_only else bad_inputs(f):
            ok, line = clean_refusal(case)
            refused.append(ok)
            if args.verbose or not ok:
                print(f"{'ok  ' if ok else 'FAIL'} {' '.join(str(a) for a in case)[-110:]}\n     {line}")
        payloads = [] if args.audit_only else payload_refusals(f)
        for ok, line in payloads:
            if args.verbose or not ok:
                print(f"{'ok  ' if ok else 'FAIL'} payload {line}")
        audit = audit_cases(f)
        for ok, line in audit:
            if args.verbose or not ok:
                print(f"{'ok  ' if ok else 'FAIL'} audit case {line}"[:400])
        killed, stopped = ([], []) if args.audit_only else kills_and_resumes(work, args.kills, args.resumes, args.seed)
    rows = [
        ("bad inputs refused in one line (exit 2, no traceback)", sum(refused), len(refused)),
        ("payload checkpoints refused before running, per command", sum(ok for ok, _ in payloads), len(payloads)),
        ("the audit's 12 failures, each handled", sum(ok for ok, _ in audit), len(audit)),
        ("SIGKILLs survived (--resume finished)", sum(done for done, _ in killed), len(killed)),
        ("SIGKILL + --resume equal to the uninterrupted weights", sum(eq for _, eq in killed), len(killed)),
        ("SIGTERM + --resume equal to the uninterrupted weights", sum(eq for _, eq in stopped), len(stopped)),
    ]
    rows = [row for row in rows if row[2]]  # --audit-only measures the audit's row alone
    print(f"\n| {'what':<60} | {'count':>9} |\n|{'-' * 62}|{'-' * 11}|")
    for what, good, total in rows:
        print(f"| {what:<60} | {good:>4} / {total:<2} |")
    print(json.dumps({what: [good, total] for what, good, total in rows}))


if __name__ == "__main__":
    main_()
