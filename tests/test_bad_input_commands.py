"""Bad checkpoints, and bad input to the commands that read one (finetune, probe, export, energy, restore,
segment): one line saying what was wrong and what to do, exit code 2, no traceback."""

import pytest
import torch
from cli_runs import TRAIN, fails_cleanly, one_torch_thread, run_cli, tiny_image_folder  # noqa: F401 (autouse)

from pretexts.cli import main
from pretexts.engine.training.checkpoint import FORMAT_VERSION, save_checkpoint

FAST = TRAIN + ["--epochs", "1", "--max-steps-per-epoch", "1", "--workers", "0"]  # one step


# ---- checkpoints --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A two-epoch run of one step each."""
    out = tmp_path_factory.mktemp("trained")
    data = tiny_image_folder(tmp_path_factory.mktemp("data"))
    args = FAST + ["--epochs", "2", "--data", str(data), "--out", str(out)]
    result, _ = run_cli(args)
    assert result.exit_code == 0, result.output
    return out / "checkpoint.pt"


def test_bad_checkpoints(trained, tmp_path):
    resume = FAST + ["--epochs", "3", "--out", str(tmp_path / "resumed"), "--resume"]
    fails_cleanly(resume + [str(tmp_path / "nope.pt")], "nope.pt' does not exist")
    fails_cleanly(["export", "--checkpoint", tmp_path / "nope.pt", "--out", tmp_path / "export"], "does not exist")
    assert not (tmp_path / "export").exists()  # a refused command leaves no empty folder behind
    fails_cleanly(FAST + ["--out", str(tmp_path / "fresh"), "--resume"], "no checkpoint in", "start without --resume")
    data = trained.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    fails_cleanly(resume + [str(tmp_path / "cut.pt")], "cannot be read", "truncated")
    fails_cleanly(
        resume + [str(trained), "--backbone", "test_resnet"],
        "backbone='test_convnext'",
        "a resumed run keeps its --backbone",
    )
    fails_cleanly(resume + [str(trained), "--task", "colorization"], "task='random-mask'")
    ckpt = torch.load(trained, weights_only=False)
    sr = {**ckpt["config"], "task": "super-resolution", "task_args": {"scale": "4"}}
    save_checkpoint({**ckpt, "config": sr}, tmp_path / "sr4.pt")
    fails_cleanly(
        resume + [str(tmp_path / "sr4.pt"), "--task", "super-resolution", "--task-arg", "scale=8"],
        "task_args={'scale': '4'}",
        "a resumed run keeps its --task-arg and --preset",
    )
    fails_cleanly(
        FAST + ["--epochs", "1", "--out", str(tmp_path / "r"), "--resume", str(trained)],
        "has done 2 epochs, more than the 1 asked",
        "raise --epochs",
    )
    ckpt = torch.load(trained, weights_only=False)
    save_checkpoint({**ckpt, "format_version": 99}, tmp_path / "future.pt")
    fails_cleanly(resume + [str(tmp_path / "future.pt")], "format version 99", f"reads version {FORMAT_VERSION}")
    torch.save({"state_dict": ckpt["model"]}, tmp_path / "foreign.pt")
    fails_cleanly(resume + [str(tmp_path / "foreign.pt")], "is not a pretexts checkpoint", "checkpoint.pt written")
    for name in ("config.json", "loss_curve.png"):  # a run's other files, given for its checkpoint
        (tmp_path / name).write_bytes(b"\x89PNG\r\n" if name.endswith("png") else b'{"epochs": 2}')
        fails_cleanly(resume + [str(tmp_path / name)], f"'{tmp_path / name}' is not a checkpoint", "checkpoint.pt")
    model = {k: v for k, v in ckpt["model"].items() if "head" not in k}
    save_checkpoint({**ckpt, "model": model}, tmp_path / "mismatch.pt")
    fails_cleanly(resume + [str(tmp_path / "mismatch.pt")], "does not fit this model", "head.weight")
    optimizer = ckpt["optimizer"]  # another version's grouping of the same parameters
    merged = [{**optimizer["param_groups"][0], "params": sum((g["params"] for g in optimizer["param_groups"]), [])}]
    save_checkpoint({**ckpt, "optimizer": {**optimizer, "param_groups": merged}}, tmp_path / "regrouped.pt")
    fails_cleanly(resume + [str(tmp_path / "regrouped.pt")], "groups its optimizer's parameters as [", "--force")


# ---- the other commands: the same machinery, their own bad inputs ------------------------------
OTHER_COMMANDS = [
    (["finetune", "--checkpoint", "{missing}"], ["missing.pt' does not exist"]),
    (["finetune", "--checkpoint", "{cut}"], ["cannot be read", "truncated"]),
    (["finetune", "--checkpoint", "{ckpt}", "--epochs", "0"], ["--epochs (epochs) must be in [1, 100000], got 0"]),
    (
        ["finetune", "--checkpoint", "{ckpt}", "--label-fraction", "2"],
        ["--label-fraction (label_fraction) must be in (0, 1]"],
    ),
    (["finetune", "--checkpoint", "{ckpt}", "--data", "{missing}"], ["data path", "does not exist"]),
    (["finetune", "--from-scratch", "--backbone", "resnet181"], ["Did you mean: resnet18"]),
    (["finetune"], ["give --checkpoint"]),
    (["probe", "--checkpoint", "{cut}"], ["truncated"]),
    (["probe", "--checkpoint", "{run}"], ["lacks model.safetensors", "Did you mean '{ckpt}'?"]),
    (
        ["probe", "--checkpoint", "{ckpt}", "--probe", "knn", "--knn-k", "0"],
        ["probe knn: parameter 'knn_k' is 0; allowed range is [1, "],
    ),
    (["export", "--checkpoint", "{foreign}", "--out", "{tmp}/x.pth"], ["is not a pretexts checkpoint"]),
    (["export", "--checkpoint", "{ckpt}", "--out", "{file}/x.pth"], ["'{file}'", "choose another --out"]),
    (
        ["energy", "--checkpoint", "{ckpt}", "--out", "{tmp}/e.png", "--task", "colorisation"],
        ["Did you mean: colorization"],
    ),
    (
        ["energy", "--checkpoint", "{ckpt}", "--out", "{tmp}/e.png", "--images", "0"],
        ["'--images': 0 is not in the range 2<=x<=100000"],
    ),
    (
        [
            "restore",
            "--checkpoint",
            "{ckpt}",
            "--out",
            "{tmp}/r.png",
            "--task",
            "gridded-mask",
            "--task-arg",
            "grid=64",
        ],
        ["use grid <= 8"],
    ),
    (
        ["restore", "--checkpoint", "{ckpt}", "--out", "{file}/r.png", "--images", "2"],
        ["output folder '{file}' cannot be written"],
    ),
    # the start-of-run checks of train hold for every config that has the field (issue 19)
    (["finetune", "--checkpoint", "{ckpt}", "--lr", "inf"], ["--lr (lr) must be a finite number, got inf"]),
    (["finetune", "--checkpoint", "{ckpt}", "--base-lr", "5"], ["--base-lr (base_lr) must be in (0, 1], got 5.0"]),
    (["finetune", "--checkpoint", "{ckpt}", "--betas", "0.9", "1.5"], ["--betas (betas) must be in [0, 1), got 1.5"]),
    (["finetune", "--checkpoint", "{ckpt}", "--min-lr", "0.1"], ["--min-lr (min_lr) must be <= the peak lr"]),
    (
        ["finetune", "--checkpoint", "{ckpt}", "--seed", "99999999999999999999999"],
        ["--seed (seed) must be in [0, 4294967295]"],
    ),
    (
        ["finetune", "--from-scratch", "--backbone", "resnet18", "--img-size", "5000"],
        ["--img-size (img_size) must be in [8, 4096]"],
    ),
    (
        ["finetune", "--checkpoint", "{ckpt}", "--smoothing", "nan"],
        ["--smoothing (smoothing) must be a finite number, got nan"],
    ),
    (
        ["probe", "--checkpoint", "{ckpt}", "--lr", "1e4"],
        ["probe linear: parameter 'lr' is 10000.0; allowed range is [1e-12, 1.0]"],
    ),
    (
        ["probe", "--checkpoint", "{ckpt}", "--knn-temperature", "inf"],
        ["parameter 'knn_temperature' is inf; allowed range"],
    ),
    (["probe", "--checkpoint", "{ckpt}", "--seed", "-5"], ["--seed (seed) must be in [0, 4294967295], got -5"]),
    (
        ["segment", "--checkpoint", "{ckpt}", "--data", "generated", "--out", "{tmp}/s", "--lr", "nan"],
        ["--lr (lr) must be a finite number, got nan"],
    ),
    (
        ["segment", "--checkpoint", "{ckpt}", "--data", "generated", "--out", "{tmp}/s", "--img-size", "2"],
        ["--img-size (img_size) must be in [8, 4096], got 2"],
    ),
    (
        ["segment", "--checkpoint", "{ckpt}", "--data", "generated", "--out", "{tmp}/s", "--batch-size", "0"],
        ["--batch-size (batch_size) must be in [1, 65536], got 0"],
    ),
]


@pytest.mark.parametrize(
    "args, expected", OTHER_COMMANDS, ids=[f"{a[0]}{i}" for i, (a, _) in enumerate(OTHER_COMMANDS)]
)
def test_other_commands_bad_input(trained, tmp_path, args, expected):
    if args[0] not in main.commands:
        pytest.skip(f"`pretexts {args[0]}` has not landed")
    data = trained.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    torch.save({"weights": torch.ones(2)}, tmp_path / "foreign.pt")
    (tmp_path / "file").write_text("")
    paths = {
        "missing": tmp_path / "missing.pt",
        "cut": tmp_path / "cut.pt",
        "ckpt": trained,
        "foreign": tmp_path / "foreign.pt",
        "tmp": tmp_path,
        "file": tmp_path / "file",
        "run": trained.parent,
    }
    fails_cleanly([a.format(**paths) for a in args], *(e.format(**paths) for e in expected))
