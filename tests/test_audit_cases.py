"""The independent audit's bad inputs (issue 37): each one a clean `Error:` line and exit 2, or a run that goes
on, never a hang, a traceback or a lost file. Cases 4, 6 and 7 (upper bounds of options) are in
tests/test_option_fuzz.py."""

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_runs import TRAIN, copy_sample_images, fails_cleanly, one_torch_thread, run_cli  # noqa: F401 (autouse)

RUN = TRAIN + ["--max-steps-per-epoch", "1", "--workers", "0", "--eval-images", "2", "--figure-images", "2"]


@contextmanager
def within(seconds: int):
    """Fail, instead of hanging the suite, when the body runs longer than `seconds` (the old code never ended)."""

    def stop(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def laughs(key: str, indent: str = "") -> str:
    """`key:` holding YAML's billion laughs: nine nested lists of ten aliases, 10^9 values from ~500 bytes."""
    rows = [f"{indent}  - &a0 [{', '.join(['x'] * 10)}]"]
    rows += [f"{indent}  - &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return f"{indent}{key}:\n" + "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Two finished runs of one step per epoch on 32 images: A of 2 epochs, B of 3."""
    root = tmp_path_factory.mktemp("runs")
    data = copy_sample_images(root / "data" / "train", 16).parent
    copy_sample_images(data / "val", 1, split="val")
    for name, epochs in (("A", 2), ("B", 3)):
        result, _ = run_cli(RUN + ["--epochs", epochs, "--data", data, "--out", root / name])
        assert result.exit_code == 0, result.output
    return {"A": root / "A", "B": root / "B", "data": data}


def test_case_01_yaml_aliases_that_expand_to_a_billion_values_are_refused(tmp_path):
    (tmp_path / "tasks.yaml").write_text("task: mixed\ntask_args:\n" + laughs("tasks", "  "))
    (tmp_path / "betas.yaml").write_text(laughs("betas"))
    assert (tmp_path / "tasks.yaml").stat().st_size < 1024
    with within(120):
        for name in ("tasks.yaml", "betas.yaml"):
            fails_cleanly(RUN + ["--config", tmp_path / name], f"config file '{tmp_path / name}'", "100,000 values")
        flow = "[&a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], " + ", ".join(
            f"&{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in zip("abcdefgh", "bcdefghi")
        )
        fails_cleanly(RUN + ["--set", f"betas={flow}]"], "--set betas=", "100,000 values")


def test_case_02_values_nested_thousands_deep_are_refused(tmp_path):
    (tmp_path / "deep.json").write_text('{"task_args": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    (tmp_path / "deep.yaml").write_text("task_args:\n  x: " + "[" * 5_000 + "]" * 5_000 + "\n")
    for name in ("deep.json", "deep.yaml"):
        fails_cleanly(RUN + ["--config", tmp_path / name], f"config file '{tmp_path / name}'", "deeper than 32 levels")
    deep = "{x: " + "[" * 3_000 + "]" * 3_000 + "}"
    fails_cleanly(RUN + ["--set", f"task_args={deep}"], "--set task_args=", "deeper than 32 levels")


def test_case_03_file_and_folder_names_that_are_not_utf8_are_written_escaped(tmp_path):
    # the data folder, a class folder and an unreadable image, each named with a byte that is not UTF-8
    data = tmp_path / os.fsdecode(b"da\xffta")
    copy_sample_images(data / "train", 8, classes=("a", os.fsdecode(b"cl\xffass")))
    copy_sample_images(data / "val", 1, classes=("a", os.fsdecode(b"cl\xffass")), split="val")  # train/'s classes
    (data / "train" / "a" / os.fsdecode(b"bad\xff.png")).write_bytes(b"not an image")
    result, _ = run_cli(RUN + ["--epochs", "1", "--data", data, "--out", tmp_path / "out"])
    assert result.exit_code == 0, result.output
    skipped = (tmp_path / "out" / "skipped_images.txt").read_text(encoding="utf-8")
    assert "a/bad\\udcff.png\t" in skipped
    assert (tmp_path / "out" / "checkpoint.pt").is_file()
    assert "da\\udcffta" in result.output  # the start line names the data folder escaped


def test_case_05_compile_backends_are_checked_and_false_means_off(tmp_path):
    fails_cleanly(RUN + ["--compile", "bogus", "--out", tmp_path / "bogus"], "'bogus'", "inductor")
    assert not (tmp_path / "bogus").exists()
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"compile": "false", "data": "sample", "epochs": 1}))
    result, _ = run_cli(RUN + ["--config", config, "--out", tmp_path / "off"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "off" / "config.json").read_text())["compile"] is None


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
        if parent in ancestors and f"RANK={rank}".encode() in environ and b"TORCHELASTIC_RUN_ID" in b" ".join(environ):
            return int(entry.name)
    return None


@pytest.mark.slow
def test_case_08_a_lost_rank_is_one_line_on_the_survivor_naming_it_and_the_resume_command(tmp_path):
    out, logs = tmp_path / "run", tmp_path / "logs"
    settings = RUN[1:] + ["--data", "sample", "--epochs", "100000", "--figure-every", "0", "--quiet", "--out", out]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command = [*launcher, "--redirects", "3", "--log-dir", logs, "-m", "pretexts", "train", *settings]
    torchrun = subprocess.Popen(
        [str(a) for a in command],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 300
        while not (out / "checkpoint.pt").is_file() and time.time() < deadline and torchrun.poll() is None:
            time.sleep(0.5)
        assert (out / "checkpoint.pt").is_file(), "the run never saved a checkpoint"
        victim = rank_process(torchrun.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        torchrun.wait(timeout=120)
    finally:
        if torchrun.poll() is None:
            torchrun.kill()
    stderr = next(logs.rglob("0/stderr.log")).read_text()
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert "Traceback" not in stderr and len(errors) == 1, stderr[-3000:]
    assert "rank 1 was lost" in errors[0] and "--resume" in errors[0] and "torchrun --nproc-per-node 2" in errors[0]


def test_case_10_force_never_replaces_the_commands_own_config_file(runs):
    config = runs["A"] / "config.json"
    before = config.read_bytes()
    fails_cleanly(
        RUN + ["--config", config, "--out", runs["A"], "--force"], f"would overwrite this command's input '{config}'"
    )
    assert config.read_bytes() == before and (runs["A"] / "checkpoint.pt").is_file()


def test_case_11_resume_is_given_on_the_command_line_never_by_a_config_file(runs, tmp_path):
    checkpoint = runs["A"] / "checkpoint.pt"
    fails_cleanly(RUN + ["--resume", checkpoint, "--out", tmp_path / "B2"], "has done all 2")
    # a file's resume is a per-invocation choice a config.json once recorded: not taken, and the run says so
    (tmp_path / "c.json").write_text(json.dumps({"resume": str(checkpoint), "epochs": 1}))
    result, _ = run_cli(RUN + ["--config", tmp_path / "c.json", "--out", tmp_path / "B3"])
    assert result.exit_code == 0, result.output
    assert f'its resume: "{checkpoint}" not taken; --force and --resume are given here only' in result.output
    steps = [json.loads(line)["step"] for line in (tmp_path / "B3" / "log.jsonl").read_text().splitlines()]
    assert steps == [1]  # a fresh run, not A's continued


def test_case_12_a_refused_resume_leaves_the_other_runs_log_whole(runs):
    log = runs["B"] / "log.jsonl"
    before = log.read_bytes()
    assert [json.loads(line)["step"] for line in before.decode().splitlines()] == [1, 2, 3]
    fails_cleanly(
        RUN + ["--resume", runs["A"] / "checkpoint.pt", "--epochs", 3, "--out", runs["B"]], "already holds a run"
    )
    assert log.read_bytes() == before


def test_case_12_a_refused_fine_tune_resume_leaves_the_other_runs_log_whole(tmp_path):
    from pretexts.engine import FinetuneConfig, Finetuner
    from pretexts.errors import OutputError

    def config(out, epochs, **extra):
        return FinetuneConfig(
            from_scratch=True,
            backbone="test_convnext",
            recipe="small",
            batch_size=8,
            max_steps_per_epoch=1,
            workers=0,
            epochs=epochs,
            out=str(out),
            **extra,
        )

    Finetuner(config(tmp_path / "A", 2), echo=lambda line: None).run()
    Finetuner(config(tmp_path / "B", 3), echo=lambda line: None).run()
    log = tmp_path / "B" / "log.jsonl"
    before = log.read_bytes()
    with pytest.raises(OutputError, match="already holds a run"):
        Finetuner(config(tmp_path / "B", 3, resume=str(tmp_path / "A" / "checkpoint.pt")), echo=lambda line: None).run()
    assert log.read_bytes() == before
