"""The 12 failures an independent audit of about 310 inputs found (docs/reliability.md), each re-run by
benchmarks/reliability.py: handled when the command answers as the project asks (one `Error:` line and exit 2, or a
run that goes on), within 5 minutes, losing no file."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from reliability_harness import ENV, ONE_STEP, STEPPING, clean_refusal, cli

from pretexts.engine.data.datasets import SAMPLE_DIR


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
    """The 12 failures of the independent audit, each re-run: (handled, what happened)."""
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
            lambda: both(  # --resume alone resumes (epochs from the checkpoint: nothing left); a file's is not taken
                mentions(
                    clean_refusal(
                        [*STEPPING, "--data", f["data"], "--resume", runs["A"] / "checkpoint.pt", "--out", w / "fresh"]
                    ),
                    "has done all",
                ),
                runs_through(
                    [*train, "--config", w / "resume.json", "--out", w / "fresh-file"],
                    lambda: json.loads((w / "fresh-file" / "log.jsonl").read_text().splitlines()[0])["step"] == 1,
                ),
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
