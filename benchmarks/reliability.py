"""Reliability, re-measured: bad inputs refused in one line, malicious checkpoints refused before anything runs,
SIGKILLs survived and resumes equal to the run never stopped. Prints one table (docs/reliability.md).

    python benchmarks/reliability.py                 # all, about 10 minutes on 2 CPU cores
    python benchmarks/reliability.py --kills 3 --resumes 3

A bad input counts as refused cleanly when the command exits 2 with exactly one `Error:` line and no traceback.
A payload checkpoint is a real one with an object whose unpickling would write a marker file: it counts as
refused when the command exits 2 and the marker was never written. A kill is a SIGKILL at a random moment of
`pretexts train`, then `--resume` until done; a resume is a SIGTERM at a random moment, then `--resume`; each
counts as equal when the final weights are bit-identical to an uninterrupted run of the same command.
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
ONE_STEP = TRAIN + ["--epochs", "1", "--max-steps-per-epoch", "1", "--eval-images", "4", "--figure-images", "2"]


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
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        f = fixtures(work)
        refused = []
        for case in bad_inputs(f):
            ok, line = clean_refusal(case)
            refused.append(ok)
            if args.verbose or not ok:
                print(f"{'ok  ' if ok else 'FAIL'} {' '.join(str(a) for a in case)[-110:]}\n     {line}")
        payloads = payload_refusals(f)
        for ok, line in payloads:
            if args.verbose or not ok:
                print(f"{'ok  ' if ok else 'FAIL'} payload {line}")
        killed, stopped = kills_and_resumes(work, args.kills, args.resumes, args.seed)
    rows = [
        ("bad inputs refused in one line (exit 2, no traceback)", sum(refused), len(refused)),
        ("payload checkpoints refused before running, per command", sum(ok for ok, _ in payloads), len(payloads)),
        ("SIGKILLs survived (--resume finished)", sum(done for done, _ in killed), len(killed)),
        ("SIGKILL + --resume equal to the uninterrupted weights", sum(eq for _, eq in killed), len(killed)),
        ("SIGTERM + --resume equal to the uninterrupted weights", sum(eq for _, eq in stopped), len(stopped)),
    ]
    print(f"\n| {'what':<60} | {'count':>9} |\n|{'-' * 62}|{'-' * 11}|")
    for what, good, total in rows:
        print(f"| {what:<60} | {good:>4} / {total:<2} |")
    print(json.dumps({what: [good, total] for what, good, total in rows}))


if __name__ == "__main__":
    main_()
