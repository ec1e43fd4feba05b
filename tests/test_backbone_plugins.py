"""A backbone from a plugin package (a timm `@register_model` in a module an entry point names) works on every
command that rebuilds a checkpoint's backbone, in a process that has loaded no plugin yet: export, restore, energy
and finetune, not only train and probe."""

import json
import sys
import warnings

import pytest
from cli_runs import run_cli
from plugin_installs import plugin_installer
from pretrained_checkpoints import finetune_argv, single_thread, write_checkpoint  # noqa: F401 (a fixture)
from timm.models._registry import _clear_model_entries, _model_entrypoints

from pretexts import registry
from pretexts.backbones import factory, resolve
from pretexts.engine.evaluation.weights import timm_call, timm_weights
from pretexts.errors import CheckpointError, UnknownNameError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

BACKBONE = '''
    """A plugin's backbone: a timm architecture, registered when this module is imported."""
    from timm.models import build_model_with_cfg, generate_default_cfgs, register_model
    from torch import nn


    class PluginCNN(nn.Module):
        """Two convolutions and average pooling, with timm's classifier interface."""

        def __init__(self, num_classes=1000, in_chans=3, width=8, global_pool="avg", **kwargs):
            super().__init__()
            self.num_classes, self.num_features, self.global_pool = num_classes, 2 * width, global_pool
            self.stem = nn.Sequential(nn.Conv2d(in_chans, width, 3, 2, 1), nn.GELU())
            self.stage = nn.Sequential(nn.Conv2d(width, 2 * width, 3, 2, 1), nn.GroupNorm(1, 2 * width), nn.GELU())
            self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()

        def forward_features(self, x):
            return self.stage(self.stem(x))

        def forward_head(self, x, pre_logits=False):
            return x.mean((2, 3)) if pre_logits else self.head(x.mean((2, 3)))

        def forward(self, x):
            return self.forward_head(self.forward_features(x))

        def get_classifier(self):
            return self.head

        def reset_classifier(self, num_classes, global_pool=None):
            self.num_classes = num_classes
            self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()


    default_cfgs = generate_default_cfgs({"plugin_cnn.untrained": {"num_classes": 1000, "classifier": "head"}})


    @register_model
    def plugin_cnn(pretrained=False, **kwargs):
        return build_model_with_cfg(PluginCNN, "plugin_cnn", pretrained, **kwargs)
'''
TASK = '''
    import pretexts
    from pretexts import Corrupted, Pretext


    @pretexts.register("plugin-invert")
    class Invert(Pretext):
        """Invert every pixel."""

        def apply(self, images, params):
            return Corrupted(state=1 - images, target=images)
'''


FAILS_LATE = '''
    """A broken plugin: it registers a model, then fails; each import is counted in a file beside it."""
    from pathlib import Path

    from timm.models import register_model
    from timm.models.resnet import resnet18

    with Path(__file__).with_suffix(".imports").open("a") as imports:
        imports.write("imported\\n")


    @register_model
    def plugin_late(pretrained=False, **kwargs):
        return resnet18(pretrained=pretrained, **kwargs)


    raise ImportError("needs faiss")
'''


def as_a_new_process(monkeypatch, module: str, model: str = "plugin_cnn") -> None:
    """What a new process knows: no plugin model in timm, the plugin module not imported, no registry loaded, no
    backbone plugin loaded (so none broken: one uninstalled since is forgotten)."""
    _model_entrypoints.pop(model, None)
    _clear_model_entries(model)
    sys.modules.pop(module, None)
    factory.plugins_loaded = False
    factory.BROKEN.clear()
    for table in (registry.TASKS, registry.METHODS, registry.PROBES):
        for name in [name for name, entry in table.table.items() if entry.__module__ == module]:
            del table.table[name]
        monkeypatch.setattr(table, "loaded", False)
        monkeypatch.setattr(table, "plugins_loaded", False)


@pytest.mark.parametrize(
    "group, source, entry",
    [
        ("pretexts.backbones", BACKBONE, "plugin-cnn = pretexts_cnn"),  # a package that only adds a backbone
        ("pretexts.tasks", BACKBONE + TASK, "plugin-invert = pretexts_cnn:Invert"),  # one beside a task
    ],
    ids=["backbone-only", "beside-a-task"],
)
def test_every_command_finds_a_plugins_backbone(tmp_path, monkeypatch, group, source, entry):
    with plugin_installer(tmp_path, registry.TASKS, group) as install:
        install("pretexts_cnn", source, entry)
        __import__("pretexts_cnn")  # registered as `pretexts train --backbone plugin_cnn` would have
        checkpoint, _ = write_checkpoint(tmp_path / "ckpt.pt", "plugin_cnn")
        commands = {
            "export": ["export", "--checkpoint", checkpoint, "--out", tmp_path / "exported"],
            "restore": ["restore", "--checkpoint", checkpoint, "--images", "2", "--out", tmp_path / "r.png"],
            "energy": [
                "energy",
                "--checkpoint",
                checkpoint,
                "--images",
                "2",
                "--workers",
                "0",
                "--out",
                tmp_path / "e.png",
            ],
            "finetune": finetune_argv(checkpoint, tmp_path / "ft"),
        }
        for name, args in commands.items():
            as_a_new_process(monkeypatch, "pretexts_cnn")
            result, error = run_cli(args)
            assert result.exit_code == 0 and "unknown backbone" not in result.output, (name, result.output)
        assert (
            json.loads((tmp_path / "exported" / "pretexts.json").read_text())["pretraining"]["backbone"] == "plugin_cnn"
        )
        as_a_new_process(monkeypatch, "pretexts_cnn")  # the fine-tuned classifier exports too
        result, error = run_cli(["export", "--checkpoint", tmp_path / "ft" / "finetuned.pt", "--out", tmp_path / "cls"])
        assert result.exit_code == 0, result.output
        assert json.loads((tmp_path / "cls" / "pretexts.json").read_text())["timm_name"] == "plugin_cnn"
        as_a_new_process(monkeypatch, "pretexts_cnn")  # an export read back through timm's local-dir
        probe = ["probe", "--timm-model", f"local-dir:{tmp_path / 'exported'}", "--probe", "knn", "--workers", "0"]
        result, error = run_cli([*probe, "--out", tmp_path / "probed"])
        assert result.exit_code == 0, result.output
        assert "knn" in json.loads((tmp_path / "probed" / "results.json").read_text())
        as_a_new_process(monkeypatch, "pretexts_cnn")  # listed with timm's models
        result, error = run_cli(["list", "--backbones", "plugin_*", "--all"])
        assert result.exit_code == 0 and "  plugin_cnn" in result.output, result.output
    as_a_new_process(monkeypatch, "pretexts_cnn")


def test_a_broken_backbone_plugin_is_named_when_its_backbone_is_asked_for(tmp_path, monkeypatch):
    with plugin_installer(tmp_path, registry.TASKS, "pretexts.backbones") as install:
        install("pretexts_bad_cnn", "raise ImportError('needs faiss')\n", "bad-cnn = pretexts_bad_cnn")
        as_a_new_process(monkeypatch, "pretexts_bad_cnn")
        checkpoint, _ = write_checkpoint(tmp_path / "ckpt.pt")  # test_convnext: a built-in still resolves
        result, error = run_cli(["export", "--checkpoint", checkpoint, "--out", tmp_path / "exported"])
        assert result.exit_code == 0, result.output
        with pytest.raises(UnknownNameError) as refused:
            resolve("plugin_cnx")
        with pytest.raises(UnknownNameError) as unknown:  # `probe --timm-model` names it too
            timm_weights("plugin_cnx", None)
        listed, _ = run_cli(["list", "--backbones", "plugin_*"])  # and the listing, the plugins loaded already
    assert "BROKEN backbone plugin: pretexts_bad_cnn 1.0 (pretexts_bad_cnn) failed at " in listed.output
    as_a_new_process(monkeypatch, "pretexts_bad_cnn")
    message = str(refused.value)
    assert message.startswith("unknown backbone 'plugin_cnx'.") and "or a plugin's" in message
    failed = "A backbone plugin failed to load: pretexts_bad_cnn 1.0 (pretexts_bad_cnn) failed at "
    assert failed in message
    assert message.endswith("ImportError: needs faiss.")
    assert str(unknown.value).startswith("'plugin_cnx' is no timm model.") and failed in str(unknown.value)
    assert str(unknown.value).endswith("ImportError: needs faiss.")


def test_backbone_plugins_are_imported_once_a_process(tmp_path, monkeypatch):
    """An unknown name asked for again, and each local-dir: folder, import no plugin again: a broken one that
    registered a model before it failed is imported once, so timm never warns of the model registered twice."""
    with plugin_installer(tmp_path, registry.TASKS, "pretexts.backbones") as install:
        install("pretexts_late", FAILS_LATE, "late = pretexts_late")
        as_a_new_process(monkeypatch, "pretexts_late", "plugin_late")
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            for _ in range(2):
                with pytest.raises(UnknownNameError, match="needs faiss"):
                    resolve("plugin_cnx")
                with pytest.raises(CheckpointError, match="timm cannot build"):
                    timm_call(f"local-dir:{tmp_path / 'no-export'}", pretrained=True, num_classes=0)
    as_a_new_process(monkeypatch, "pretexts_late", "plugin_late")
    assert (tmp_path / "pretexts_late.imports").read_text() == "imported\n"
    assert not [w for w in warned if "Overwriting" in str(w.message)], [str(w.message) for w in warned]


def test_a_backbone_entry_point_naming_a_missing_attribute_names_its_module(tmp_path, monkeypatch):
    with plugin_installer(tmp_path, registry.TASKS, "pretexts.backbones") as install:
        install("pretexts_cnn", BACKBONE, "plugin-cnn = pretexts_cnn:missing")
        as_a_new_process(monkeypatch, "pretexts_cnn")
        with pytest.raises(UnknownNameError) as refused:
            resolve("plugin_cnx")
    as_a_new_process(monkeypatch, "pretexts_cnn")
    failed = f"pretexts_cnn 1.0 (pretexts_cnn:missing) failed at {tmp_path / 'pretexts_cnn.py'}: AttributeError"
    assert failed in str(refused.value), str(refused.value)
