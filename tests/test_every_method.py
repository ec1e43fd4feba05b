"""What every built-in method gives the loop alike: a step that trains the backbone, its own options on the command
line (and no other method's), old configs read into its arguments, and a held-out report in its own words."""

import dataclasses
import json

import pytest
import timm
import torch
from cli_runs import ONE_STEP
from click.testing import CliRunner
from safetensors.torch import load_file

from pretexts.cli import main
from pretexts.cli.config_file import build_config
from pretexts.engine import PretrainConfig, Pretrainer, load_checkpoint
from pretexts.engine.methods import METHODS
from pretexts.engine.training.config import with_method_args
from pretexts.errors import ParameterError

BUILT_IN = ["energy", "ae", "mae", "simmim"]
ENERGY_OPTIONS = [
    "--steps",
    "--alpha",
    "--alpha-lr-scale",
    "--head-init-std",
    "--energy-scale",
    "--grad-mode",
    "--fd-delta",
]


def config(method: str, out) -> PretrainConfig:
    backbone = "test_vit" if method == "mae" else "test_convnext"  # MAE masks ViT tokens (timm's 0.4M-parameter ViT)
    return PretrainConfig(
        method=method,
        backbone=backbone,
        batch_size=8,
        epochs=1,
        max_steps_per_epoch=1,
        workers=0,
        warmup_epochs=0,
        lr=1e-3,
        monitor_every=0,
        eval_images=8,
        figure_images=2,
        out=str(out),
    )


def options_listed(args: list[str]) -> set[str]:
    result = CliRunner().invoke(main, ["train", *args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return {line.split()[0].split("/")[0] for line in result.output.splitlines() if line.startswith("  --")}


@pytest.mark.parametrize("method", BUILT_IN)
def test_a_train_step_changes_the_backbones_weights(method, tmp_path, real_images):
    trainer = Pretrainer(config(method, tmp_path))
    backbone = trainer.model.backbone
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    stats = trainer.train_step(real_images[:8])
    assert torch.isfinite(torch.tensor(stats["loss"])) and "skipped" not in stats
    changed = [k for k, v in backbone.state_dict().items() if not torch.equal(before[k], v)]
    first = next(k for k, p in backbone.named_parameters() if p.requires_grad)
    assert first in changed, f"{method}: the gradient never reached {first}"


@pytest.mark.parametrize("method", BUILT_IN)
def test_the_held_out_report_is_the_methods_own(method, tmp_path, held_out_images):
    trainer = Pretrainer(config(method, tmp_path))
    held = trainer.method.held_out_error([held_out_images[:8]])
    line, record = held.format(), held.to_dict()
    assert json.loads(json.dumps(record)) == record  # results.json and log.jsonl take it as it is
    assert {"corrupted_mse", "restored_mse", "images"} <= set(record) and record["images"] == 8
    assert line.startswith("held-out ") and "on 8 images" in line
    if method == "energy":
        assert "restoration MSE" in line and "step 1" in line and "step 2" in line
    else:  # one reconstruction, not a step of gradient descent on an energy
        assert "reconstructed" in line and "step" not in line and "energy" not in line
        assert record["method"] == method
    if method == "mae":
        assert "patch-mean fill" in line
    assert trainer.method.figure_name == ("restoration" if method == "energy" else "reconstruction")


def test_the_help_lists_the_selected_methods_options_only():
    default, energy = options_listed([]), options_listed(["--method", "energy"])
    mae, mae_equals = options_listed(["--method", "mae"]), options_listed(["--method=mae"])
    assert set(ENERGY_OPTIONS) <= default and default == energy
    assert not set(ENERGY_OPTIONS) & mae and mae == mae_equals
    assert {"--mask-ratio", "--norm-pix-loss"} <= mae and "--loss" not in mae
    assert {"--decoder-dim", "--loss"} <= options_listed(["--method", "ae"])


def test_the_help_follows_a_config_files_method(tmp_path):
    file = tmp_path / "mae.yaml"
    file.write_text("method: mae\n")
    assert not set(ENERGY_OPTIONS) & options_listed(["--config", str(file)])
    assert "--mask-ratio" in options_listed(["--config", str(file), "--set", "method=mae"])


def test_a_methods_options_reach_its_arguments(tmp_path):
    """--steps and --grad-mode (the energy method's), --set and --method-arg all land in method_args."""
    out = tmp_path / "run"
    options = ["--monitor-every", "0", "--steps", "1", "--alpha", "0.2", "--grad-mode", "finite-difference"]
    options += ["--set", "fd_delta=0.02", "--method-arg", "energy_scale=2"]
    result = CliRunner().invoke(main, [*ONE_STEP, *options, "--out", str(out)])
    assert result.exit_code == 0, result.output
    args = json.loads((out / "config.json").read_text())["method_args"]
    assert (args["steps"], args["alpha"], args["grad_mode"], args["fd_delta"], args["energy_scale"]) == (
        1,
        0.2,
        "finite-difference",
        0.02,
        2.0,
    )
    assert "-> step 1 " in result.output and "step 2" not in result.output
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert rows[0]["alpha"] > 0  # step_stats ride on the log line
    wrong = CliRunner().invoke(main, ["train", "--method", "mae", "--steps", "1", "--out", str(tmp_path / "bad")])
    assert wrong.exit_code == 2 and "No such option" in wrong.output and "--steps" in wrong.output


def test_a_config_file_with_the_energy_options_at_the_top_reads_them_into_method_args(tmp_path):
    """A --config file may give a method's options beside the config's fields, as `--set steps=1` does: they go
    into method_args; one the method does not declare is refused by name."""
    given = {"task": "colorization", "steps": 1, "alpha": 0.3, "alpha_lr_scale": 10.0, "loss": "smooth_l1"}
    file = tmp_path / "config.json"
    file.write_text(json.dumps(given))
    built = build_config(
        PretrainConfig, {}, str(file), ("steps=0",), merge=("task_args", "method_args"), loose=with_method_args
    )
    assert built.method_args == {"steps": "0", "alpha": 0.3, "alpha_lr_scale": 10.0, "loss": "smooth_l1"}
    args = METHODS.get("energy").parse_args(built)
    assert (args["steps"], args["alpha"], args["alpha_lr_scale"], args["loss"]) == (0, 0.3, 10.0, "smooth_l1")
    file.write_text(json.dumps({"method": "mae"}))
    with pytest.raises(ParameterError, match="unknown field 'steps'"):  # MAE has no steps to set
        build_config(PretrainConfig, {}, str(file), ("steps=1",), loose=with_method_args)


@pytest.mark.parametrize("method", BUILT_IN)
def test_a_killed_run_resumes_exactly_and_its_checkpoint_fine_tunes_probes_and_exports(method, tmp_path):
    from test_resume import assert_resume_is_exact

    assert_resume_is_exact(lambda out, **extra: dataclasses.replace(config(method, tmp_path / out), epochs=2, **extra))
    ckpt = tmp_path / "straight" / "checkpoint.pt"
    for command in (
        [
            "finetune",
            "--epochs",
            "1",
            "--max-steps-per-epoch",
            "1",
            "--batch-size",
            "8",
            "--randaug",
            "none",
            "--workers",
            "0",
        ],
        ["probe", "--probe", "knn", "--workers", "0"],
        ["export"],
    ):
        result = CliRunner().invoke(
            main, [command[0], "--checkpoint", str(ckpt), *command[1:], "--out", str(tmp_path / command[0])]
        )
        assert result.exit_code == 0, f"{method}: {command[0]}: {result.output[-1500:]}"
    trained = load_checkpoint(ckpt)["model"]
    exported = load_file(tmp_path / "export" / "model.safetensors")
    name, weight = next((k, v) for k, v in exported.items() if v.ndim > 1)
    assert torch.equal(weight, trained[f"backbone.{name}"])  # the pretrained backbone, not a fresh one
    loaded = timm.create_model(f"local-dir:{tmp_path / 'export'}", pretrained=True).state_dict()
    assert torch.equal(loaded[name], weight)  # timm reads the export back as it is
