"""Fine-tuning recipes by name: `auto` (the default) picks the small-data recipe for small data and Table A for
large data (MAE's linprobe under --linear-probe), says which and why, lets explicit options win, and a resumed run
keeps the recipe it resolved."""

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from pretrained_checkpoints import single_thread  # noqa: F401 (a fixture)

from pretexts.cli import main
from pretexts.engine import FinetuneConfig, Finetuner
from pretexts.engine.evaluation import finetune_recipes
from pretexts.engine.evaluation.finetune_recipes import FINETUNE_RECIPES, auto_recipe
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

TINY = dict(from_scratch=True, backbone="test_convnext", batch_size=16, workers=0, max_steps_per_epoch=1, quiet=True)
SAMPLE_NOTE = "recipe small (auto: 320 training images < 10,000; --recipe paper for Table A)"


def count_the_sample_as_large(monkeypatch) -> None:
    """Thresholds under which the 320 sample images of 32 px are large data."""
    monkeypatch.setattr(finetune_recipes, "AUTO_MIN_IMAGES", 100)
    monkeypatch.setattr(finetune_recipes, "AUTO_MIN_IMG_SIZE", 32)


def recipe_values(cfg) -> dict:
    return {name: getattr(cfg, name) for name in FINETUNE_RECIPES["paper"]}


def test_help_shows_the_recipe_option_with_auto_as_default():
    result = CliRunner().invoke(main, ["finetune", "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    option = result.output.split("--recipe [auto|paper|small|linprobe]", 1)[1].split("\n  --", 1)[0]
    assert "[default: auto]" in option and "10,000 training images" in option


def test_the_small_recipe_is_what_the_projects_tables_used():
    """docs/results/quality.md and representation.md; a change here would silently change what compare measures."""
    assert FINETUNE_RECIPES["small"] == {
        "epochs": 15,
        "warmup_epochs": 1.0,
        "base_lr": 4e-3,
        "layer_decay": 0.75,
        "drop_path": 0.1,
        "randaug": "none",
        "crop_min_scale": 0.35,
        "crop_pct": 1.0,
        "smoothing": 0.1,
        "mixup": 0.0,
        "cutmix": 0.0,
        "weight_decay": 0.05,
    }
    paper = FinetuneConfig(from_scratch=True, backbone="resnet18", recipe="paper")
    assert recipe_values(paper) == FINETUNE_RECIPES["paper"]
    assert (paper.epochs, paper.mixup, paper.cutmix, paper.randaug) == (100, 0.8, 1.0, "rand-m9-mstd0.5-inc1-mmax9")


def test_auto_picks_by_the_number_of_training_images_and_the_image_size():
    assert auto_recipe(320, 32)[0] == "small"
    assert auto_recipe(1_281_167, 224) == (
        "paper",
        "auto: 1,281,167 training images >= 10,000, 224 px >= 64 px; --recipe small for the small-data recipe",
    )
    assert auto_recipe(50_000, 32) == ("small", "auto: 32 px images < 64 px; --recipe paper for Table A")
    assert auto_recipe(1_281_167, 224, linear_probe=True)[0] == "linprobe"  # whatever the data


def test_the_linprobe_recipe_is_maes_linear_probe():
    """main_linprobe.py's defaults (MAE's linear-probe protocol): 90 epochs, 10 of warm-up, base lr 0.1 without
    weight decay (its cosine down to 0; the min lr stays 1e-6), RandomResizedCrop and flip alone, evaluated at a
    0.875 centre crop."""
    assert FINETUNE_RECIPES["linprobe"] == {
        "epochs": 90,
        "warmup_epochs": 10.0,
        "base_lr": 0.1,
        "layer_decay": 1.0,
        "drop_path": 0.0,
        "randaug": "none",
        "crop_min_scale": 0.08,
        "crop_pct": 0.875,
        "smoothing": 0.0,
        "mixup": 0.0,
        "cutmix": 0.0,
        "weight_decay": 0.0,
    }


def test_auto_fills_at_once_what_every_recipe_it_may_pick_agrees_on():
    """The weight decay is Table A's 0.05 in both fine-tuning recipes, so a config `auto` has not resolved yet
    already holds it (build_finetune_optimizer can read it), while a linear probe's is MAE's 0."""
    tune = FinetuneConfig(from_scratch=True, backbone="resnet18")
    assert (tune.recipe, tune.weight_decay, tune.base_lr) == ("auto", 0.05, None)
    probe = FinetuneConfig(from_scratch=True, backbone="resnet18", linear_probe=True)
    assert (probe.recipe, probe.weight_decay, probe.base_lr) == ("auto", 0.0, 0.1)


def test_auto_takes_the_small_recipe_for_the_embedded_sample_and_says_why(tmp_path):
    tuner = Finetuner(FinetuneConfig(**TINY, out=str(tmp_path)), echo=lambda line: None)
    assert tuner.cfg.recipe == "small" and recipe_values(tuner.cfg) == FINETUNE_RECIPES["small"]
    assert tuner.mixup is None and tuner.recipe_note == SAMPLE_NOTE


def test_auto_takes_table_a_for_a_large_count(tmp_path, monkeypatch):
    count_the_sample_as_large(monkeypatch)
    tuner = Finetuner(FinetuneConfig(**TINY, out=str(tmp_path)), echo=lambda line: None)
    assert tuner.cfg.recipe == "paper" and recipe_values(tuner.cfg) == FINETUNE_RECIPES["paper"]
    assert tuner.mixup is not None and tuner.recipe_note.startswith("recipe paper (auto: 320 training images >= 100")


def test_explicit_options_win_over_the_recipe(tmp_path):
    cfg = FinetuneConfig(from_scratch=True, backbone="resnet18", recipe="paper", mixup=0.0, epochs=3)
    assert (cfg.mixup, cfg.epochs, cfg.cutmix, cfg.base_lr) == (0.0, 3, 1.0, 1e-3)
    tuner = Finetuner(FinetuneConfig(**TINY, mixup=0.2, epochs=2, out=str(tmp_path)), echo=lambda line: None)
    assert (tuner.cfg.recipe, tuner.cfg.mixup, tuner.cfg.epochs, tuner.cfg.base_lr) == ("small", 0.2, 2, 4e-3)
    assert tuner.recipe_note.endswith("; given: --epochs, --mixup)")


def test_recipe_errors_are_one_line():
    with pytest.raises(ParameterError, match="unknown fine-tuning recipe 'smal'.*Did you mean: small"):
        FinetuneConfig(from_scratch=True, backbone="resnet18", recipe="smal")
    with pytest.raises(ParameterError, match="Did you mean: linprobe"):  # case is ignored, as for tasks
        FinetuneConfig(from_scratch=True, backbone="resnet18", recipe="LINPROBE")
    with pytest.raises(ParameterError, match="even batch"):  # Table A mixes pairs of images
        FinetuneConfig(from_scratch=True, backbone="resnet18", recipe="paper", batch_size=15)
    assert FinetuneConfig(from_scratch=True, backbone="resnet18", recipe="small", batch_size=15).batch_size == 15


def test_compare_fine_tunes_with_the_small_recipe(tmp_path, monkeypatch):
    from pretexts.engine.compare import scoring

    built = []

    class Recorded:
        def __init__(self, cfg, echo):
            built.append(cfg)
            self.dtype = None

        def run(self):
            return {"final_top1": 1.0, "best_top1": 1.0, "top1": [1.0]}

    monkeypatch.setattr(scoring, "Finetuner", Recorded)
    study = SimpleNamespace(
        data="sample", finetune_epochs=15, batch_size=64, device="cpu", finetune_amp="off", max_images=10_000, workers=0
    )
    scoring.finetune(study, tmp_path / "checkpoint.pt", seed=0)
    assert built[0].recipe == "small" and recipe_values(built[0]) == FINETUNE_RECIPES["small"]


def test_a_one_epoch_auto_fine_tune_runs_without_mixing_and_a_resume_keeps_its_recipe(tmp_path, monkeypatch):
    out = tmp_path / "ft"
    args = ["finetune", "--from-scratch", "--backbone", "test_convnext", "--batch-size", "16", "--workers", "0"]
    args += ["--max-steps-per-epoch", "1", "--quiet", "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--epochs", "1"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert "for 1 epoch ->" in first and first.endswith(f"; {SAMPLE_NOTE.replace(')', '; given: --epochs)')}"), first
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"] == "small" and (config["mixup"], config["cutmix"], config["randaug"]) == (0.0, 0.0, "none")
    assert {k: config[k] for k in FINETUNE_RECIPES["small"] if k != "epochs"} == {
        k: v for k, v in FINETUNE_RECIPES["small"].items() if k != "epochs"
    }

    count_the_sample_as_large(monkeypatch)  # auto would now pick Table A
    result = CliRunner().invoke(main, [*args, "--epochs", "2", "--resume"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith("; recipe small (given: --epochs)"), result.output
    config = json.loads((out / "config.json").read_text())
    assert (config["recipe"], config["epochs"], config["mixup"], config["cutmix"]) == ("small", 2, 0.0, 0.0)
    assert json.loads((out / "results.json").read_text())["optimizer_steps"] == 2
