"""Export: timm rebuilds the pretrained backbone from the file with strict keys and equal outputs."""

import json
import shutil

import pytest
import timm
import torch
from click.testing import CliRunner
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts import create_pretext
from pretexts.backbones.vit_tokens import sincos_pos_embed
from pretexts.base import Corrupted
from pretexts.cli import main
from pretexts.engine import export_backbone
from pretexts.engine.evaluation.linear_probe_protocol import FINE_TUNE
from pretexts.engine.methods.states import state_adapter

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


def timm_model(info: dict) -> torch.nn.Module:
    """The documented one-liner, run as written."""
    return eval(info["load"], {"timm": timm}).eval()


@pytest.mark.parametrize("backbone, suffix", [("convnext_atto", ".safetensors"), ("resnet18", ".pth")])
def test_exported_cnn_equals_the_in_package_backbone(tmp_path, backbone, suffix):
    path, energy_model = write_checkpoint(tmp_path / "ckpt.pt", backbone)
    info = export_backbone(str(path), str(tmp_path / f"backbone{suffix}"))
    exported = timm_model(info)
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(
            exported(energy_model.normalize(images)), energy_model.backbone(energy_model.normalize(images))
        )
    # strict: the file holds exactly the model's keys
    file_state = timm.models.load_state_dict(str(tmp_path / f"backbone{suffix}"))
    assert set(file_state) == set(exported.state_dict())


def test_exported_patch_sorting_vit_carries_the_sincos_table(tmp_path):
    path, energy_model = write_checkpoint(tmp_path / "ckpt.pt", "vit_tiny", "patch-sorting", task_args={"edge_max": 1})
    info = export_backbone(str(path), str(tmp_path / "vit.safetensors"))
    assert (
        info["kwargs"] == {"patch_size": 4, "img_size": 32, "num_classes": 0}
        and info["timm_name"] == "vit_tiny_patch16_224"
    )
    exported = timm_model(info)
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    table = sincos_pos_embed((8, 8), 192).expand(2, -1, -1)
    sorted_sample = Corrupted(state=table, target=table, context=images)
    states = state_adapter(create_pretext("patch-sorting"), energy_model)
    with torch.no_grad():  # the energy the checkpoint's sorting saw, from the plain timm ViT
        torch.testing.assert_close(
            energy_model.score(exported(energy_model.normalize(images))),
            states.energy(sorted_sample, table),
            atol=1e-5,
            rtol=1e-4,
        )


def test_cli_export_prints_the_load_line_and_writes_its_json(tmp_path):
    path, _ = write_checkpoint(tmp_path / "ckpt.pt", "convnext_atto")
    out = tmp_path / "w" / "backbone.safetensors"
    result = CliRunner().invoke(main, ["export", "--checkpoint", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "timm.create_model('convnext_atto', pretrained=True" in result.output
    info = json.loads(out.with_suffix(".json").read_text())
    assert info["pretraining"]["task"] == "colorization" and info["parameters"] > 3_000_000 and out.is_file()


def test_folder_export_is_hub_ready_and_loads_with_one_timm_call(tmp_path):
    path, energy_model = write_checkpoint(tmp_path / "ckpt.pt", "vit_tiny")
    out = tmp_path / "vit_tiny_energy"
    info = export_backbone(str(path), str(out))
    assert info["load"] == f"timm.create_model('local-dir:{out}', pretrained=True)"
    assert {"model.safetensors", "config.json", "pretexts.json"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert config["pretrained_cfg"]["input_size"] == [3, 32, 32] and config["pretrained_cfg"]["tag"] == "pretexts"
    exported = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    assert exported.pretrained_cfg["input_size"] == (3, 32, 32) and exported.num_classes == 0
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(
            exported(energy_model.normalize(images)),
            energy_model.backbone(energy_model.normalize(images)),
            atol=1e-5,
            rtol=1e-4,
        )


def test_file_export_load_line_carries_the_trained_input_size(tmp_path):
    path, _ = write_checkpoint(tmp_path / "ckpt.pt", "vit_tiny")
    info = export_backbone(str(path), str(tmp_path / "vit.safetensors"))
    assert timm_model(info).pretrained_cfg["input_size"] == (3, 32, 32)


@pytest.fixture(scope="module")
def finetuned_run(tmp_path_factory):
    """A one-epoch fine-tuning run from a pretraining checkpoint: its checkpoint.pt and finetuned.pt."""
    from pretexts.engine import FinetuneConfig, finetune

    root = tmp_path_factory.mktemp("finetuned")
    ckpt, _ = write_checkpoint(root / "pretrain.pt", "convnext_atto")
    out = root / "run"
    finetune(
        FinetuneConfig(
            checkpoint=str(ckpt),
            epochs=1,
            max_steps_per_epoch=2,
            batch_size=16,
            workers=0,
            mixup=0,
            cutmix=0,
            randaug="none",
            crop_pct=0.5,  # not timm's default: the export must carry the crop its val_top1 was scored at
            out=str(out),
        ),
        echo=lambda line: None,
    )
    return out


@pytest.mark.parametrize("name", ["finetuned.pt", "checkpoint.pt"])
def test_cli_exports_a_fine_tuned_model_with_its_classifier(tmp_path, finetuned_run, name):
    saved = torch.load(finetuned_run / "finetuned.pt", weights_only=False)
    reference = timm.create_model(saved["timm_name"], **saved["timm_kwargs"])
    reference.load_state_dict(saved["model"])
    out = tmp_path / "export"
    result = CliRunner().invoke(main, ["export", "--checkpoint", str(finetuned_run / name), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"local-dir:{out}" in result.output and "32x32 px" in result.output
    exported = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    assert exported.num_classes == 10 and exported.pretrained_cfg["input_size"] == (3, 32, 32)
    assert exported.pretrained_cfg["crop_pct"] == 0.5  # timm's eval transform then scores as the fine-tune did
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(exported(images), reference.eval()(images))


def test_a_fine_tuning_checkpoint_is_refused_as_a_pretraining_one(finetuned_run, tmp_path):
    result = CliRunner().invoke(
        main, ["finetune", "--checkpoint", str(finetuned_run / "finetuned.pt"), "--out", str(tmp_path / "again")]
    )
    assert result.exit_code == 2 and "is a fine-tuning checkpoint" in result.output


def test_push_to_hub_uploads_the_exported_folder(tmp_path, monkeypatch):
    """The Hub is mocked at its network boundary (huggingface_hub.HfApi); everything above it runs for real."""
    import huggingface_hub

    uploaded = tmp_path / "uploaded"

    def upload_folder(self, repo_id, folder_path, **kwargs):
        shutil.copytree(folder_path, uploaded)
        return f"https://huggingface.co/{repo_id}/commit/1"

    monkeypatch.setattr(
        huggingface_hub.HfApi,
        "create_repo",
        lambda self, repo_id, **kwargs: huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}"),
    )
    monkeypatch.setattr(huggingface_hub.HfApi, "file_exists", lambda self, **kwargs: False)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    path, _ = write_checkpoint(tmp_path / "ckpt.pt", "convnext_atto")
    result = CliRunner().invoke(
        main,
        [
            "export",
            "--checkpoint",
            str(path),
            "--out",
            str(tmp_path / "local"),
            "--push-to-hub",
            "someone/pretexts-convnext",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "pushed to https://huggingface.co/someone/pretexts-convnext/commit/1" in result.output
    assert {"model.safetensors", "config.json", "README.md"} <= {p.name for p in uploaded.iterdir()}
    assert "license: mit" in (uploaded / "README.md").read_text()  # the project's licence, not timm's default
    model = timm.create_model(f"local-dir:{uploaded}", pretrained=True)
    assert model.pretrained_cfg["input_size"] == (3, 32, 32)


def test_a_failed_upload_keeps_the_local_export_and_says_how_to_fix_it(tmp_path, monkeypatch):
    import huggingface_hub

    def refuse(self, repo_id, **kwargs):
        raise RuntimeError("401 Unauthorized")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", refuse)
    path, _ = write_checkpoint(tmp_path / "ckpt.pt", "convnext_atto")
    out = tmp_path / "local"
    result = CliRunner().invoke(
        main, ["export", "--checkpoint", str(path), "--out", str(out), "--push-to-hub", "someone/x"]
    )
    assert result.exit_code == 2 and "401" in result.output and "--force" in result.output
    assert timm.create_model(f"local-dir:{out}", pretrained=True).num_classes == 0


def test_export_says_mit_and_carries_the_class_names(tmp_path, finetuned_run):
    """config.json's licence is the project's (timm's architectures say apache-2.0), and a classifier's class names
    ride as timm's label_names, so the Hub and `model.pretrained_cfg` show them."""
    ckpt, _ = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext")
    export_backbone(str(ckpt), str(tmp_path / "backbone"))
    config = json.loads((tmp_path / "backbone" / "config.json").read_text())
    assert config["pretrained_cfg"]["license"] == "mit" and "label_names" not in config
    export_backbone(str(finetuned_run / "finetuned.pt"), str(tmp_path / "classifier"))
    config = json.loads((tmp_path / "classifier" / "config.json").read_text())
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    assert config["pretrained_cfg"]["license"] == "mit" and config["label_names"] == classes
    assert config["num_classes"] == config["pretrained_cfg"]["num_classes"] == 10
    model = timm.create_model(f"local-dir:{tmp_path / 'classifier'}", pretrained=True)
    assert model.pretrained_cfg["label_names"] == classes and model.pretrained_cfg["license"] == "mit"


def test_best_pt_exports_as_the_best_epochs_classifier(tmp_path, finetuned_run):
    saved = torch.load(finetuned_run / "best.pt", weights_only=True)
    out = tmp_path / "best"
    result = CliRunner().invoke(main, ["export", "--checkpoint", str(finetuned_run / "best.pt"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "pretexts.json").read_text())
    assert info["fine_tuned"]["epoch"] == saved["epoch"] == 1 and info["fine_tuned"]["val_top1"] == saved["top1"]
    assert info["fine_tuned"]["protocol"] == FINE_TUNE  # not a linear probe
    exported = timm.create_model(f"local-dir:{out}", pretrained=True)
    for key, value in exported.state_dict().items():
        torch.testing.assert_close(value, saved["model"][key], msg=key)
