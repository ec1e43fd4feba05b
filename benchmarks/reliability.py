"""Reliability, re-measured: bad inputs refused in one line, malicious checkpoints refused before anything runs,
SIGKILLs survived and resumes equal to the run never stopped. Prints one table (docs/reliability.md).

    python benchmarks/reliability.py                 # all, about 10 minutes on 2 CPU cores
    python benchmarks/reliability.py --kills 3 --resumes 3
    python benchmarks/reliability.py --audit-only     # the audit's 12 cases (issue 37), about 3 minutes

A bad input counts as refused cleanly when the command exits 2 with exactly one `Error:` line and no traceback.
A payload checkpoint is a real one with an object whose unpickling would write a marker file: it counts as
refused when the command exits 2 and the marker was never written. A kill is a SIGKILL at a random moment of
`pretexts train`, then `--resume` until done; a resume is a SIGTERM at a random moment, then `--resume`; each
counts as equal when the final weights are bit-identical to an uninterrupted run of the same command. The
audit's cases are the 12 failures an independent audit found (issue 37): each counts as handled when the command
answers as the issue asks (one `Error:` line and exit 2, or a run that goes on), within 5 minutes, losing no file.
"""

import argparse
import json
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from click.testing import CliRunner

from pretexts.cli import main
from pretexts.engine.data.datasets import SAMPLE_DIR
from pretexts.engine.training.checkpoint import load_checkpoint, save_checkpoint

TRAIN = ["train", "--backbone", "test_convnext", "--batch-size", "8", "--workers", "0"]
STEPPING = TRAIN + ["--max-steps-per-epoch", "1", "--eval-images", "4", "--figure-images", "2"]
ONE_STEP = STEPPING + ["--epochs", "1"]


class Payload:
    """Unpickling it calls `Path(marker).touch()`: code run from a checkpoint."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def cli(args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def clean_refusal(args) -> tuple[bool, str]:
    code, output = cli(args)
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    ok = code == 2 and len(errors) == 1 and "Traceback" not in output
    return ok, errors[0] if errors else output.strip().splitlines()[-1:] and output.strip().splitlines()[-1]


def fixtures(work: Path) -> dict:
    """A pretraining run, a fine-tuning run, a segmentation run, and broken or hostile inputs made from them."""
    f = {"work": work}
    data = work / "data"
    for cls in ("a", "b"):
        (data / cls).mkdir(parents=True)
        for path in sorted((SAMPLE_DIR / "train").glob("*/*.png"))[:10]:
            shutil.copy(path, data / cls / f"{path.parent.name}_{path.name}")
    f["data"] = data
    assert cli([*ONE_STEP, "--data", data, "--out", work / "pre"])[0] == 0
    f["pre"] = work / "pre" / "checkpoint.pt"
    assert (
        cli(
            [
                "finetune",
                "--checkpoint",
                f["pre"],
                "--data",
                data,
                "--epochs",
                "1",
                "--max-steps-per-epoch",
                "1",
                "--batch-size",
                "8",
                "--workers",
                "0",
                "--randaug",
                "none",
                "--mixup",
                "0",
                "--cutmix",
                "0",
                "--out",
                work / "ft",
            ]
        )[0]
        == 0
    )
    f["ft"] = work / "ft" / "checkpoint.pt"
    assert (
        cli(
            [
                "segment",
                "--from-scratch",
                "--backbone",
                "resnet18",
                "--img-size",
                "32",
                "--data",
                "generated",
                "--max-steps",
                "1",
                "--head",
                "linear",
                "--out",
                work / "seg",
            ]
        )[0]
        == 0
    )
    f["seg"] = work / "seg" / "segmenter.pt"
    raw = f["pre"].read_bytes()
    ckpt = torch.load(f["pre"], weights_only=True)
    flipped = bytearray(raw)
    at = raw.index(b"data/0") + 200  # inside the zip's first tensor record
    flipped[at] ^= 0xFF
    (work / "flipped.pt").write_bytes(bytes(flipped))
    f["flipped"] = work / "flipped.pt"
    save_checkpoint({**ckpt, "config": {}}, work / "empty-config.pt")
    f["empty_config"] = work / "empty-config.pt"
    resnet = torch.load(work / "seg" / "segmenter.pt", weights_only=True)
    save_checkpoint(
        {**ckpt, "model": {k.replace("features.backbone.", "backbone."): v for k, v in resnet["model"].items()}},
        work / "wrong-shapes.pt",
    )
    f["wrong_shapes"] = work / "wrong-shapes.pt"
    cifar = work / "cifar" / "cifar-10-batches-py"
    cifar.mkdir(parents=True)
    (cifar / "data_batch_1").write_bytes(pickle.dumps({"data": [1, 2]})[:10])
    f["cifar"] = work / "cifar"
    loop = work / "loop"
    (loop / "x").mkdir(parents=True)
    for path in sorted((SAMPLE_DIR / "train").glob("*/*.png"))[:10]:
        shutil.copy(path, loop / "x" / path.name)
    (loop / "x" / "again").symlink_to(loop / "x")
    f["loop"] = loop
    (work / "three-betas.yaml").write_text("betas: [0.9, 0.95, 0.99]\n")
    f["three_betas"] = work / "three-betas.yaml"
    (work / "a-file").write_text("not a folder")
    f["file"] = work / "a-file"
    return f


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
        ["upgrade-checkpoint", f["pre"], f["pre"]],
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


# ---- the audit's cases (issue 37) -----------------------------------------------------------------------
def laughs(key: str, indent: str = "") -> str:
    """`key:` holding YAML's billion laughs: nine nested lists of ten aliases, 10^9 values from ~500 bytes."""
    rows = [f"{indent}  - &a0 [{', '.join(['x'] * 10)}]"]
    rows += [f"{indent}  - &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return f"{indent}{key}:\n" + "\n".join(rows) + "\n"


class Hung(Exception):
    pass


def within(seconds: int, check) -> tuple[bool, str]:
    """`check()` -> (ok, line), or a failure when it runs longer than `seconds` (a hang, as the audit saw)."""

    def stop(*_):
        raise Hung

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        return check()
    except Hung:
        return False, f"still running after {seconds} s"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def rank_process(parent: int, rank: int) -> int | None:
    """The pid of torchrun's worker of `rank` under the process `parent`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            pid, ancestors = int(entry.name), []
            while pid > 1 and len(ancestors) < 5:
                pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
                ancestors.append(pid)
        except (OSError, ValueError):
            continue
        if parent in ancestors and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


def lost_rank(w: Path) -> tuple[bool, str]:
    """Two gloo ranks on the CPU; rank 1 SIGKILLed after the first checkpoint: rank 0's stderr must be one line."""
    out, logs = w / "torchrun", w / "torchrun-logs"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    settings = [*STEPPING[1:], "--data", "sample", "--epochs", "100000", "--figure-every", "0", "--quiet"]
    command = [*launcher, "--redirects", "3", "--log-dir", logs, "-m", "pretexts", "train", *settings, "--out", out]
    run = subprocess.Popen([str(a) for a in command], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (out / "checkpoint.pt").is_file() and time.time() < deadline and run.poll() is None:
            time.sleep(0.5)
        victim = rank_process(run.pid, 1)
        if victim is None:
            return False, "rank 1 not found"
        os.kill(victim, signal.SIGKILL)
        run.wait(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    stderr = next(logs.rglob("0/stderr.log")).read_text()
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    ok = len(errors) == 1 and "Traceback" not in stderr and "rank 1" in errors[0] and "--resume" in errors[0]
    return ok, errors[0] if len(errors) == 1 else f"{stderr.count('Traceback')} tracebacks, {len(errors)} Error lines"


def python_m_with_yaml_py(w: Path) -> tuple[bool, str]:
    folder = w / "cwd-module"
    folder.mkdir()
    (folder / "yaml.py").write_text("open('IMPORTED', 'w').close()\n")
    done = subprocess.run([sys.executable, "-m", "pretexts", "train", "--help"], cwd=folder, capture_output=True)
    imported = (folder / "IMPORTED").exists()
    return (
        done.returncode == 0 and not imported,
        f"exit {done.returncode}, ./yaml.py {'IMPORTED' if imported else 'not imported'}",
    )


def audit_cases(f: dict) -> list[tuple[bool, str]]:
    """The 12 failures of the independent audit behind issue 37, each re-run: (handled, what happened)."""
    w = f["work"]
    train = [*ONE_STEP, "--data", f["data"]]
    (w / "laughs.yaml").write_text("task: mixed\ntask_args:\n" + laughs("tasks", "  "))
    (w / "laughs-betas.yaml").write_text(laughs("betas"))
    (w / "deep.json").write_text('{"task_args": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    (w / "deep.yaml").write_text("task_args:\n  x: " + "[" * 5_000 + "]" * 5_000 + "\n")
    (w / "compile-false.json").write_text(json.dumps({"compile": "false"}))
    odd = w / "odd-names"
    for cls in ("a", os.fsdecode(b"cl\xffass")):
        (odd / cls).mkdir(parents=True)
        for path in sorted((SAMPLE_DIR / "train").glob("*/*.png"))[:8]:
            shutil.copy(path, odd / cls / path.name)
    (odd / "a" / os.fsdecode(b"bad\xff.png")).write_bytes(b"not an image")
    runs = {name: w / f"audit-{name}" for name in ("A", "B")}
    for name, epochs in (("A", "2"), ("B", "3")):
        assert cli([*train, "--epochs", epochs, "--out", runs[name]])[0] == 0
    (w / "resume.json").write_text(json.dumps({"resume": str(runs["A"] / "checkpoint.pt")}))
    config_a = (runs["A"] / "config.json").read_bytes()
    log_b = (runs["B"] / "log.jsonl").read_bytes()

    def both(*answers) -> tuple[bool, str]:
        """Every answer handled; the line of the first that was not (or of the first)."""
        return all(ok for ok, _ in answers), next((line for ok, line in answers if not ok), answers[0][1])

    def all_refused(*cases) -> tuple[bool, str]:
        return both(*map(clean_refusal, cases))

    def runs_through(args, expect) -> tuple[bool, str]:
        code, output = cli(args)
        return code == 0 and expect(), f"exit {code}: {output.strip().splitlines()[-1:]}"

    def mentions(answer, words) -> tuple[bool, str]:
        return answer[0] and words in answer[1], answer[1]

    def and_kept(answer, kept) -> tuple[bool, str]:
        return answer[0] and kept(), answer[1] if kept() else f"{answer[1]} (but the file changed)"

    setting_deep = "task_args={x: " + "[" * 3_000 + "]" * 3_000 + "}"
    checks = [
        (
            "1 YAML aliases (billion laughs)",
            lambda: all_refused([*train, "--config", w / "laughs.yaml"], [*train, "--config", w / "laughs-betas.yaml"]),
        ),
        (
            "2 values nested thousands deep",
            lambda: all_refused(
                [*train, "--config", w / "deep.json"],
                [*train, "--config", w / "deep.yaml"],
                [*train, "--set", setting_deep],
            ),
        ),
        (
            "3 names that are not UTF-8",
            lambda: runs_through(
                [*ONE_STEP, "--data", odd, "--out", w / "odd-run"],
                lambda: "\\udcff" in (w / "odd-run" / "skipped_images.txt").read_text(),
            ),
        ),
        (
            "4 --drop-path 2",
            lambda: clean_refusal(
                ["finetune", "--checkpoint", f["pre"], "--data", f["data"], "--drop-path", "2", "--out", w / "dp"]
            ),
        ),
        (
            "5 --compile bogus; compile: 'false'",
            lambda: both(
                clean_refusal([*train, "--compile", "bogus", "--out", w / "c1"]),
                runs_through([*train, "--config", w / "compile-false.json", "--out", w / "c2"], lambda: True),
            ),
        ),
        ("6 --workers 10000", lambda: clean_refusal([*train, "--workers", "10000", "--out", w / "wk"])),
        ("7 --steps 1000000000", lambda: clean_refusal([*train, "--steps", "1000000000", "--out", w / "st"])),
        ("8 a torchrun rank killed", lambda: lost_rank(w)),
        ("9 python -m pretexts beside a yaml.py", lambda: python_m_with_yaml_py(w)),
        (
            "10 --force with --out holding the --config",
            lambda: and_kept(
                clean_refusal([*train, "--config", runs["A"] / "config.json", "--out", runs["A"], "--force"]),
                lambda: (runs["A"] / "config.json").read_bytes() == config_a,
            ),
        ),
        (
            "11 resume in a config file",
            lambda: both(  # epochs from the checkpoint, as with --resume: the refusal must be that nothing is left
                *(
                    mentions(
                        clean_refusal([*STEPPING, "--data", f["data"], *resume, "--out", w / "fresh"]), "has done all"
                    )
                    for resume in (["--config", w / "resume.json"], ["--resume", runs["A"] / "checkpoint.pt"])
                )
            ),
        ),
        (
            "12 a refused resume and another run's log",
            lambda: and_kept(
                clean_refusal([*train, "--resume", runs["A"] / "checkpoint.pt", "--epochs", "3", "--out", runs["B"]]),
                lambda: (runs["B"] / "log.jsonl").read_bytes() == log_b,
            ),
        ),
    ]
    answers = [(name, *within(300, check)) for name, check in checks]
    return [(ok, f"{name}: {line}") for name, ok, line in answers]


# ---- kills and resumes ------------------------------------------------------------------------------
RUN = [
    sys.executable,
    "-m",
    "pretexts",
    *TRAIN,
    "--epochs",
    "4",
    "--max-steps-per-epoch",
    "3",
    "--eval-images",
    "4",
    "--figure-images",
    "2",
    "--seed",
    "1",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def weights(path: Path) -> dict:
    return load_checkpoint(path)["model"]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def interrupted_then_resumed(out: Path, sig: int, delay: float, reference: dict) -> tuple[bool, bool]:
    """(the run finished after --resume, its weights equal the reference)."""
    run = subprocess.Popen([*RUN, "--out", out], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    run.send_signal(sig)
    run.wait()
    for _ in range(3):  # a kill before the first checkpoint leaves nothing to resume: start again
        resume = ["--resume"] if (out / "checkpoint.pt").exists() else ["--force"]
        done = subprocess.run([*RUN, "--out", out, *resume], env=ENV, capture_output=True, text=True)
        if done.returncode == 0:
            return True, same(weights(out / "checkpoint.pt"), reference)
    return False, False


def kills_and_resumes(work: Path, kills: int, resumes: int, seed: int) -> tuple[list, list]:
    rng = random.Random(seed)
    started = time.time()
    subprocess.run([*RUN, "--out", work / "reference"], env=ENV, check=True, capture_output=True)
    duration = time.time() - started
    reference = weights(work / "reference" / "checkpoint.pt")
    killed = [
        interrupted_then_resumed(work / f"kill{i}", signal.SIGKILL, rng.uniform(0.3, 1.0) * duration, reference)
        for i in range(kills)
    ]
    stopped = [
        interrupted_then_resumed(work / f"term{i}", signal.SIGTERM, rng.uniform(0.4, 0.95) * duration, reference)
        for i in range(resumes)
    ]
    return killed, stopped


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
        ("the audit's 12 failures (issue 37), each handled", sum(ok for ok, _ in audit), len(audit)),
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
