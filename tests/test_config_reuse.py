"""A run's config.json given back through --config: what the recipe, `auto` and the method derived is derived again
from the file's given values and the command line's (a changed recipe, backbone or method gets its own); --force and
--resume are never recorded nor taken from a file; a file's method options stay with its method."""

import json

import pytest
from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (a fixture)

QUICK = ["--epochs", "1", "--max-steps-per-epoch", "1", "--workers", "0", "--monitor-every", "0"]
QUICK += ["--eval-images", "2", "--figure-images", "2"]
FINETUNE = ["finetune", "--from-scratch", "--backbone", "test_convnext", "--batch-size", "16", "--workers", "0"]
FINETUNE += ["--max-steps-per-epoch", "1", "--quiet", "--epochs", "1"]


def saved(out) -> dict:
    return json.loads((out / "config.json").read_text())


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    """A ConvNeXt run of the paper's recipe that was given its base lr and alpha, the rest derived."""
    out = tmp_path_factory.mktemp("reuse") / "paper"
    result, _ = run_cli([*TRAIN, *QUICK, "--recipe", "paper", "--base-lr", "5e-4", "--alpha", "0.2", "--out", out])
    assert result.exit_code == 0, result.output
    return out


def test_a_reused_config_takes_the_recipe_and_backbone_of_the_command_line(paper_run, tmp_path):
    first = saved(paper_run)
    assert (first["schedule"], first["method_args"]["alpha_lr_scale"], first["method_args"]["loss"]) == (
        "cosine",
        1.0,
        "mse",
    )
    out = tmp_path / "again"
    result, _ = run_cli(
        ["train", "--config", paper_run / "config.json", "--recipe", "fast", "--backbone", "test_vit", "--out", out]
    )
    assert result.exit_code == 0, result.output
    again = saved(out)
    args = again["method_args"]
    assert (again["recipe"], again["schedule"], args["alpha_lr_scale"]) == ("fast", "constant", 400.0)  # fast's
    assert (args["loss"], args["positions"]) == ("patch-centred", "sincos")  # what auto gives a ViT
    assert (again["base_lr"], args["alpha"]) == (5e-4, 0.2)  # given to the first run: they stand
    assert f"config {paper_run / 'config.json'}: the settings it was given" in result.output
    assert "derived again for this run" in result.output and "schedule" in result.output
    assert {"schedule", "compile"} <= set(first["derived"]) and "base_lr" not in first["derived"]  # the record


def test_force_and_resume_are_never_recorded_nor_taken_from_a_file(paper_run, tmp_path):
    result, _ = run_cli(["train", "--resume", "--out", paper_run, "--epochs", "2", "--workers", "0"])
    assert result.exit_code == 0, result.output
    resumed = saved(paper_run)
    assert not {"force", "resume"} & set(resumed)
    assert resumed["derived"]["schedule"] == {"asked": None, "was": "cosine"}  # still the recipe's
    fresh = tmp_path / "fresh"
    result, _ = run_cli(["train", "--config", paper_run / "config.json", "--epochs", "1", "--out", fresh])
    assert result.exit_code == 0, result.output  # no --resume typed: a fresh run
    assert [json.loads(line)["step"] for line in (fresh / "log.jsonl").read_text().splitlines()] == [1]
    older = tmp_path / "older.json"  # as config.json was once written: both recorded
    older.write_text(json.dumps({**resumed, "force": True, "resume": "auto"}))
    before = (paper_run / "checkpoint.pt").read_bytes()
    result, error = run_cli(["train", "--config", older, "--out", paper_run])
    assert result.exit_code == 2 and "already holds a run" in error, result.output  # no --force typed
    assert 'its force: true, resume: "auto" not taken' in result.output
    assert (paper_run / "checkpoint.pt").read_bytes() == before


def test_a_file_of_another_method_leaves_its_method_options_out(paper_run, tmp_path):
    out = tmp_path / "mae"
    result, _ = run_cli(
        ["train", "--config", paper_run / "config.json", "--method", "mae", "--backbone", "test_vit", "--out", out]
    )
    assert result.exit_code == 0, result.output
    assert "its method_args (alpha) are method energy's, left out for mae." in result.output
    assert "mask_ratio" in saved(out)["method_args"] and "alpha" not in saved(out)["method_args"]


def test_a_reused_fine_tuning_config_takes_the_recipe_of_the_command_line(tmp_path):
    first = tmp_path / "small"
    result, _ = run_cli([*FINETUNE, "--randaug", "none", "--out", first])
    assert result.exit_code == 0, result.output
    out = tmp_path / "paper"
    result, _ = run_cli(["finetune", "--config", first / "config.json", "--recipe", "paper", "--out", out])
    assert result.exit_code == 0, result.output
    again = saved(out)
    assert (again["base_lr"], again["mixup"], again["cutmix"], again["warmup_epochs"]) == (1e-3, 0.8, 1.0, 5.0)
    assert (again["randaug"], again["epochs"]) == ("none", 1)  # given to the first run: 'none' stays off
    assert saved(first)["derived"]["recipe"] == {"asked": "auto", "was": "small"}  # auto picked it


def test_a_saved_config_with_its_derived_record_loads_through_the_api(paper_run):
    from pretexts.engine import PretrainConfig

    cfg = PretrainConfig.from_dict(saved(paper_run))  # the values as the run used them
    assert (cfg.recipe, cfg.schedule, cfg.base_lr, cfg.method_args["alpha_lr_scale"]) == ("paper", "cosine", 5e-4, 1.0)


def test_a_derived_value_edited_in_the_file_counts_as_given(paper_run, tmp_path):
    from pretexts.cli.config_file import build_config
    from pretexts.engine import PretrainConfig
    from pretexts.engine.training.config import with_method_args

    edited = saved(paper_run)
    edited["schedule"], edited["method_args"]["alpha_lr_scale"] = "constant", 3.0  # both derived in the run
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    lines = []
    file = str(tmp_path / "edited.json")
    cfg = build_config(PretrainConfig, {}, file, (), ("method_args",), loose=with_method_args, echo=lines.append)
    assert (cfg.schedule, cfg.method_args["alpha_lr_scale"], cfg.compile) == ("constant", 3.0, "auto")
    assert "loss" not in cfg.method_args and "schedule" not in lines[0] and "compile" in lines[0]
