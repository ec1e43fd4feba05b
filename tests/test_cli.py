"""The `pretexts` command through click's CliRunner."""

import json

import click
import pytest
from cli_runs import ONE_STEP, TRAIN
from click.testing import CliRunner
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts import list_pretexts
from pretexts.cli import main


def test_list_shows_tasks_with_parameters():
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0, result.output
    assert "colorization" in result.output and "Grayscale input" in result.output


def test_list_of_a_pattern_that_matches_nothing_says_so_with_the_wildcard_and_close_names():
    result = CliRunner().invoke(main, ["list", "rando"])
    assert result.exit_code == 0 and "no pretext task matches 'rando'" in result.output
    assert "'rando*' lists names it begins" in result.output and "Did you mean: random-mask" in result.output
    result = CliRunner().invoke(main, ["list", "--methods", "zz*"])
    assert result.output.strip() == "no method matches 'zz*'."


def test_list_verbose_shows_ranges_defaults_and_presets():
    result = CliRunner().invoke(main, ["list", "-v"])
    assert result.exit_code == 0, result.output
    assert "--task-arg ratio=...  float in [0.0, 1.0], default 0.7" in result.output
    assert "--preset small: count=75, low=0.01, high=0.025" in result.output
    assert "--preset large: count=25, low=0.02, high=0.05" in result.output
    result = CliRunner().invoke(main, ["list", "*-mask"])
    assert [line.split()[0] for line in result.output.splitlines() if not line.startswith(" ")] == [
        "gridded-mask",
        "random-mask",
    ]


def test_train_writes_checkpoint_log_figure_and_reports_held_out_error(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        [
            "train",
            "--task",
            "colorization",
            "--backbone",
            "test_resnet",
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--max-steps-per-epoch",
            "2",
            "--workers",
            "0",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "held-out restoration MSE on 80 images: corrupted" in result.output
    assert "schedule auto: constant after the warm-up" in result.output  # the fast recipe's auto, resolved
    assert json.loads((out / "config.json").read_text())["schedule"] == "constant"  # and recorded
    assert (out / "checkpoint.pt").is_file() and (out / "restoration_epoch001.png").is_file()
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["alpha"] > 0 for r in rows)


def test_unknown_task_is_one_line_error_with_exit_code_2():
    result = CliRunner().invoke(main, ["train", "--task", "colorisation"])
    assert result.exit_code == 2
    assert "Did you mean: colorization" in result.output
    assert "Traceback" not in result.output


def test_bad_task_argument_names_the_valid_ones():
    result = CliRunner().invoke(main, ["train", "--task-arg", "scale"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
    result = CliRunner().invoke(main, ["train", "--task-arg", "scale=4"])
    assert result.exit_code == 2 and "unknown parameter 'scale'" in result.output


def test_non_positive_settings_are_refused():
    result = CliRunner().invoke(main, ["train", "--batch-size", "0"])
    assert result.exit_code == 2 and "--batch-size (batch_size) must be in [1, 65536], got 0" in result.output


def test_restore_draws_the_figure_for_any_task(tmp_path):
    runner = CliRunner()
    out = tmp_path / "run"
    result = runner.invoke(
        main,
        [
            "train",
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--max-steps-per-epoch",
            "1",
            "--workers",
            "0",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    fig = tmp_path / "sr.png"
    result = runner.invoke(
        main,
        [
            "restore",
            "--checkpoint",
            str(out / "checkpoint.pt"),
            "--task",
            "super-resolution",
            "--task-arg",
            "scale=4",
            "--images",
            "4",
            "--out",
            str(fig),
        ],
    )
    assert result.exit_code == 0, result.output
    assert fig.stat().st_size > 0
    numbers = json.loads(fig.with_suffix(".json").read_text())
    assert numbers["task"] == "super-resolution" and numbers["task_args"]["scale"] == 4
    assert numbers["images"] == 4 and len(numbers["restored_mse"]) == 2


@pytest.fixture(scope="module")
def vit_checkpoint(tmp_path_factory):
    """An untrained vit_tiny (patch 4 at 32 px): every task, patch sorting included, can restore with it."""
    return write_checkpoint(tmp_path_factory.mktemp("vit") / "checkpoint.pt", "vit_tiny")[0]


@pytest.mark.usefixtures("single_thread")
@pytest.mark.parametrize("task", [t for t in list_pretexts() if t != "jpeg"])
def test_restore_works_for_every_task(tmp_path, vit_checkpoint, task):
    fig = tmp_path / f"{task}.png"
    extra = ["--task-arg", "edge_max=1"] if task == "patch-sorting" else []
    result = CliRunner().invoke(
        main,
        [
            "restore",
            "--checkpoint",
            str(vit_checkpoint),
            "--task",
            task,
            *extra,
            "--images",
            "3",
            "--steps",
            "1",
            "--out",
            str(fig),
        ],
    )
    assert result.exit_code == 0, result.output
    numbers = json.loads(fig.with_suffix(".json").read_text())
    assert numbers["task"] == task and numbers["images"] == 3 and len(numbers["restored_mse"]) == 1
    assert numbers["corrupted_mse"] > 0 and fig.stat().st_size > 10_000


def test_list_backbones_shows_aliases_and_timm_names_by_pattern():
    result = CliRunner().invoke(main, ["list", "--backbones", "vit_t*"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1] == "  vit_tiny       vit_tiny_patch16_224 (patch_size=4, img_size=32)"
    assert "  vit_tiny_patch16_224" not in lines and lines[-1].endswith("match 'vit_t*'; add --all to list them.")
    every = CliRunner().invoke(main, ["list", "--backbones", "vit_t*", "--all"]).output.splitlines()
    assert "  vit_tiny_patch16_224" in every and all("resnet" not in line.lower() for line in every)
    result = CliRunner().invoke(main, ["list", "--backbones", "no_such_net*"])
    assert result.output.strip() == "0 timm models match 'no_such_net*'."


def test_list_methods_shows_each_method_and_its_arguments_with_ranges():
    result = CliRunner().invoke(main, ["list", "--methods"])
    assert result.exit_code == 0, result.output
    names = [line.split()[0] for line in result.output.splitlines() if not line.startswith(" ")]
    assert names == ["energy", "ae", "mae", "simmim"]
    assert "--method-arg decoder_dim=...  int in [8, 4096], default None. decoder width" in result.output
    assert "--method-arg mask_ratio=...  float in [0.01, 0.99], default 0.75" in result.output
    only = CliRunner().invoke(main, ["list", "--methods", "m*"]).output
    assert only.startswith("mae ") and "decoder_dim" in only and "energy" not in only


def test_the_wrote_line_names_every_file_of_the_run(tmp_path):
    out = tmp_path / "run"
    two_steps = [*TRAIN, "--epochs", "2", "--max-steps-per-epoch", "1", "--workers", "0"]
    result = CliRunner().invoke(main, [*two_steps, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == (
        f"wrote {out}/: checkpoint.pt, config.json, log.jsonl, loss_curve.png, "
        f"monitor.png, restoration_epoch001-002.png, results.json"
    )
    assert len(list(out.iterdir())) == 8  # the lock is gone


@pytest.mark.parametrize(
    "command, config",
    [
        ("train", "pretexts.engine.training.config:PretrainConfig"),
        ("finetune", "pretexts.engine.evaluation.finetune_config:FinetuneConfig"),
        ("probe", "pretexts.engine.evaluation.probe:ProbeConfig"),
    ],
)
def test_help_shows_every_default_the_config_declares(command, config):
    import dataclasses
    import importlib
    import re

    module, _, name = config.partition(":")
    fields = {
        f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        for f in dataclasses.fields(getattr(importlib.import_module(module), name))
    }
    help_text = CliRunner().invoke(main, [command, "--help"], terminal_width=200).output
    entries = dict(re.findall(r"^  (--[a-z-]+)[^\n]*((?:\n {20,}[^\n]*)*)", help_text, re.M))
    options = {p.name: p for p in main.commands[command].params}
    for field, default in fields.items():
        param = options.get(field)
        if param is None or getattr(param, "is_flag", False) or default in (None, (), {}, dataclasses.MISSING):
            continue
        line = next(row for row in help_text.splitlines() if row.strip().startswith(param.opts[0] + " "))
        shown = line + entries.get(param.opts[0], "")
        assert "[default: " in " ".join(shown.split()), (field, shown)


@pytest.mark.parametrize(
    "command, config",
    [
        ("train", "pretexts.engine.training.config:PretrainConfig"),
        ("finetune", "pretexts.engine.evaluation.finetune_config:FinetuneConfig"),
        ("probe", "pretexts.engine.evaluation.probe:ProbeConfig"),
        ("segment", "pretexts.engine.evaluation.segmentation.config:SegmentConfig"),
    ],
)
def test_every_config_field_is_reachable_as_an_option(command, config, tmp_path):
    """Each field of the command's config dataclass has its own option, and the option reaches the field."""
    import dataclasses
    import importlib

    module, _, name = config.partition(":")
    cls = getattr(importlib.import_module(module), name)
    options = {p.name for p in main.commands[command].params}
    assert [f.name for f in dataclasses.fields(cls) if f.name not in options] == []


def test_betas_and_eval_sizes_reach_the_training_config(tmp_path):
    out = tmp_path / "run"
    options = ["--betas", "0.8", "0.99", "--eval-images", "8", "--figure-images", "3"]
    result = CliRunner().invoke(main, [*ONE_STEP, *options, "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "config.json").read_text())
    assert saved["betas"] == [0.8, 0.99] and saved["eval_images"] == 8 and saved["figure_images"] == 3
    assert json.loads((out / "results.json").read_text())["held_out"]["images"] == 8


def test_generated_options_read_values_as_their_fields_declare():
    """Options built from the dataclasses: optional values, pairs, repeats, choices and flags."""

    def parsed(command, args):
        return main.commands[command].make_context(command, args).params

    train = parsed("train", ["--resume", "--compile", "--betas", "0.8", "0.9", "--quiet", "--epochs", "3"])
    assert (train["resume"], train["compile"], train["betas"], train["quiet"], train["epochs"]) == (
        "auto",
        "inductor",
        (0.8, 0.9),
        True,
        3,
    )
    assert parsed("train", [])["epochs"] is None  # not given: the dataclass's default stands
    probe = parsed("probe", ["--probe", "knn", "--probe", "linear", "--knn-k", "5", "--knn-k", "7"])
    assert probe["probes"] == ("knn", "linear") and probe["knn_k"] == (5, 7)
    with pytest.raises(click.BadParameter, match="'fast' is not one of 'auto', 'mse', 'smooth_l1'"):
        parsed("train", ["--loss", "fast"])
    assert parsed("finetune", ["--from-scratch"])["from_scratch"] is True
