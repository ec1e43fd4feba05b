"""--config and --set: a run's saved config.json starts the same run again; YAML subsets and overrides."""

import json

import pytest
import torch
from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (a fixture)
from pretrained_checkpoints import finetune_argv, write_checkpoint


def weights(path) -> dict:
    return torch.load(path, weights_only=False)["model"]


def test_a_saved_config_reproduces_the_run_to_the_same_weights(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    result, _ = run_cli(
        [
            *TRAIN,
            "--epochs",
            "1",
            "--max-steps-per-epoch",
            "2",
            "--workers",
            "0",
            "--task",
            "super-resolution",
            "--task-arg",
            "scale=4",
            "--out",
            first,
        ]
    )
    assert result.exit_code == 0, result.output
    result, _ = run_cli(["train", "--config", first / "config.json", "--out", second])
    assert result.exit_code == 0, result.output
    saved = json.loads((second / "config.json").read_text())
    assert saved == {**json.loads((first / "config.json").read_text()), "out": str(second)}
    a, b = weights(first / "checkpoint.pt"), weights(second / "checkpoint.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_yaml_subset_with_options_and_sets_in_that_order(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "backbone: test_convnext\nbatch_size: 8\nepochs: 3\nworkers: 0\nmax_steps_per_epoch: 1\n"
        "task: super-resolution\ntask_args: {scale: 8}\nbase_lr: 0.5\nmin_lr: 1e-6\n"
    )
    out = tmp_path / "run"
    result, _ = run_cli(
        [
            "train",
            "--config",
            config,
            "--epochs",
            "1",
            "--task-arg",
            "scale=4",
            "--out",
            out,
            "--set",
            "base_lr=1e-3",
            "--set",
            "lr=none",
            "--set",
            "betas=[0.9, 0.99]",
        ]
    )
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "config.json").read_text())
    assert saved["epochs"] == 1 and saved["task_args"] == {"scale": "4"} and saved["base_lr"] == 1e-3
    assert saved["lr"] is None and saved["betas"] == [0.9, 0.99] and saved["backbone"] == "test_convnext"
    assert saved["min_lr"] == 1e-6  # YAML 1.1 reads 1e-6 as a string; the field makes it a float


def test_unknown_field_suggests_the_close_one(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("epoch: 3\n")
    result, error = run_cli(["train", "--config", config])
    assert result.exit_code == 2 and "unknown field 'epoch'" in error and "Did you mean: epochs" in error
    result, error = run_cli(["train", "--set", "bacth_size=8"])
    assert result.exit_code == 2 and "Did you mean: batch_size" in error


def test_bad_config_files_and_values_are_one_line_errors(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("epochs: [1, 2\n")
    assert "cannot be parsed" in run_cli(["train", "--config", broken])[1]
    assert "does not exist" in run_cli(["train", "--config", tmp_path / "missing.yaml"])[1]
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    assert "must hold a mapping" in run_cli(["train", "--config", listing])[1]
    toml = tmp_path / "run.toml"
    toml.write_text("epochs = 2\n")  # YAML would read it as one string
    assert "is not YAML or JSON; give a .yaml, .yml or .json file" in run_cli(["train", "--config", toml])[1]
    assert "is a file, not a folder" in run_cli(["train", "--out", listing, "--epochs", "1"])[1]
    assert "must be a number" in run_cli(["train", "--set", "base_lr=fast"])[1]
    result, error = run_cli(["train", "--set", "epochs=-1"])
    assert result.exit_code == 2 and "--epochs (epochs) must be in [1, 100000], got -1" in error


def test_a_bad_value_from_the_file_names_the_file(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("batch_size: [1, 2]\nbase_lr: -1\n")
    result, error = run_cli(["train", "--config", config, "--base-lr", "0.001"])
    assert result.exit_code == 2 and f"config file '{config}': batch_size must be int, got [1, 2]" in error
    config.write_text("batch_size: 8\nbase_lr: -1\n")
    assert f"config file '{config}': base_lr must be in (0, 1], got -1" in run_cli(["train", "--config", config])[1]
    # the command line's own bad value is its own, not the file's
    error = run_cli(["train", "--config", config, "--base-lr", "0.001", "--epochs", "0"])[1]
    assert "config file" not in error and "--epochs (epochs) must be in [1, 100000], got 0" in error


def test_probe_and_finetune_take_their_saved_configs(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "pretrain.pt")
    probe = tmp_path / "probe"
    result, _ = run_cli(
        ["probe", "--checkpoint", ckpt, "--probe", "knn", "--knn-k", "5", "--workers", "0", "--out", probe]
    )
    assert result.exit_code == 0, result.output
    again = tmp_path / "probe2"
    result, _ = run_cli(["probe", "--config", probe / "config.json", "--set", f"out={again}"])
    assert result.exit_code == 0, result.output
    first, second = (json.loads((p / "results.json").read_text()) for p in (probe, again))
    assert first["knn"] == second["knn"]
    assert "give --checkpoint CKPT" in run_cli(["probe", "--workers", "0"])[1]  # or --timm-model, --from-scratch
    finetune = tmp_path / "ft"
    result, _ = run_cli(finetune_argv(ckpt, finetune))
    assert result.exit_code == 0, result.output
    result, _ = run_cli(["finetune", "--config", finetune / "config.json", "--out", tmp_path / "ft2"])
    assert result.exit_code == 0, result.output
    a, b = weights(finetune / "finetuned.pt"), weights(tmp_path / "ft2" / "finetuned.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_from_dict_refuses_an_unknown_key_by_name_and_routes_a_method_option():
    from pretexts.engine import FinetuneConfig, PretrainConfig
    from pretexts.errors import ParameterError

    with pytest.raises(ParameterError, match="unknown field 'batchsize' for PretrainConfig. Did you mean: batch_size"):
        PretrainConfig.from_dict({"epochs": 1, "batchsize": 3})
    with pytest.raises(ParameterError, match="unknown field 'top1' for FinetuneConfig"):  # a results.json, say
        FinetuneConfig.from_dict({"top1": 50.0})
    assert PretrainConfig.from_dict({"steps": 3}).method_args == {"steps": 3}  # the energy method's option


def test_an_entry_point_given_another_object_says_which_config_it_takes(tmp_path):
    import pretexts
    from pretexts.engine import FinetuneConfig, PretrainConfig, finetune
    from pretexts.errors import ParameterError

    with pytest.raises(ParameterError, match=r"expected a PretrainConfig, got a dict: .*PretrainConfig.from_dict"):
        pretexts.pretrain({"epochs": 1})
    with pytest.raises(ParameterError, match="expected a FinetuneConfig, got a PretrainConfig"):
        finetune(PretrainConfig(out=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists()
    assert isinstance(FinetuneConfig.from_dict({"checkpoint": "c.pt"}), FinetuneConfig)
