"""What config.json records as derived follows the values the run used: a run never changes the config it was
given (the same object runs again as set), and a field set after the recipe filled it counts as given. A text
field's 'none' is text from --set as from a file; --config's notes follow the start line."""

import dataclasses
import json

import pytest
from cli_runs import TRAIN, one_torch_thread, run_cli, tiny_image_folder  # noqa: F401 (a fixture)

QUIET = {"workers": 0, "quiet": True}


def saved(out) -> dict:
    return json.loads((out / "config.json").read_text())


def test_a_probe_config_run_again_records_what_it_was_given_the_second_time(tmp_path):
    from pretexts.engine import ProbeConfig, run_probe

    cfg = ProbeConfig(from_scratch=True, backbone="test_convnext", probes=("knn",), out=str(tmp_path / "a"), **QUIET)
    before = dataclasses.asdict(cfg)
    run_probe(cfg, echo=lambda line: None)
    assert dataclasses.asdict(cfg) == before and "derived" not in vars(cfg)  # the caller's config, left as given
    assert saved(tmp_path / "a")["derived"]["data"] == {"asked": None, "was": "sample"}
    mine = str(tiny_image_folder(tmp_path / "mine"))
    cfg.data, cfg.out = mine, str(tmp_path / "b")
    run_probe(cfg, echo=lambda line: None)
    second = saved(tmp_path / "b")
    assert second["data"] == mine and "data" not in second["derived"]  # given, this time
    result, _ = run_cli(["probe", "--config", tmp_path / "b" / "config.json", "--out", tmp_path / "c"])
    assert result.exit_code == 0, result.output
    assert saved(tmp_path / "c")["data"] == mine  # a --config of it keeps the data, not the checkpoint's
    lines = result.output.splitlines()
    assert lines[0].startswith("probing test_convnext at random init") and lines[1].startswith("config "), lines


def test_a_recipe_filled_field_set_after_construction_is_recorded_as_given(tmp_path):
    from pretexts.engine import PretrainConfig, Pretrainer
    from pretexts.engine.training.config_record import saved_settings

    quick = dict(epochs=1, max_steps_per_epoch=1, monitor_every=0, eval_images=2, figure_images=2, **QUIET)
    cfg = PretrainConfig(backbone="test_convnext", batch_size=8, recipe="paper", out=str(tmp_path / "run"), **quick)
    assert {"base_lr", "schedule"} <= set(saved_settings(cfg)["derived"])  # both filled by the recipe
    cfg.base_lr = 5e-4
    record = saved_settings(cfg)
    assert "base_lr" not in record["derived"] and record["derived"]["schedule"] == {"asked": None, "was": "cosine"}
    Pretrainer(cfg).run()  # its record is a copy of cfg, noting what cfg noted and still holds
    run = saved(tmp_path / "run")
    assert run["base_lr"] == 5e-4 and "base_lr" not in run["derived"]
    assert run["derived"]["weight_decay"] == {"asked": None, "was": 0.05}


def test_a_note_whose_field_is_set_back_to_its_value_holds_again():
    from pretexts.engine import PretrainConfig
    from pretexts.engine.training.config_record import derived_of

    cfg = PretrainConfig(recipe="paper", method_args={"alpha": 0.2})
    cfg.betas = (0.5, 0.5)
    assert "betas" not in derived_of(cfg)
    cfg.betas = (0.9, 0.95)  # the value the recipe filled: derived as it was
    assert derived_of(cfg)["betas"] is None


def finetune_config(sets=(), file=None):
    from pretexts.cli.config_file import build_config
    from pretexts.engine import FinetuneConfig

    given = {"recipe": "paper", "from_scratch": True, "backbone": "test_convnext"}
    return build_config(FinetuneConfig, given, file and str(file), sets, echo=lambda line: None)


@pytest.mark.parametrize("spelled", ["none", "None", "NONE"])
def test_randaug_none_turns_randaugment_off_from_set_as_from_a_file(tmp_path, spelled):
    (tmp_path / "c.yaml").write_text(f"randaug: {spelled}\n")
    by_set, by_file = finetune_config((f"randaug={spelled}",)), finetune_config(file=tmp_path / "c.yaml")
    assert by_set.randaug == by_file.randaug == spelled and by_set.randaug_policy is None  # off: the recipe's unused
    assert by_set.mixup == 0.8  # the rest of the paper's recipe


@pytest.mark.parametrize("null", ["null", "~", ""])
def test_yaml_null_leaves_a_text_field_to_the_recipe_from_set_as_from_a_file(tmp_path, null):
    (tmp_path / "c.yaml").write_text(f"randaug: {null}\n")
    recipe = finetune_config().randaug
    assert recipe.startswith("rand-")
    assert finetune_config((f"randaug={null}",)).randaug == finetune_config(file=tmp_path / "c.yaml").randaug == recipe


def test_none_is_still_none_for_a_field_that_is_no_text():
    from pretexts.cli.config_file import build_config
    from pretexts.engine import PretrainConfig

    cfg = build_config(PretrainConfig, {"recipe": "fast"}, None, ("base_lr=none",), echo=lambda line: None)
    assert cfg.base_lr == 1e-3  # the recipe's
