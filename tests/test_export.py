"""Export: timm rebuilds the pretrained backbone from the file with strict keys and equal outputs."""
import json

import pytest
import timm
import torch
from click.testing import CliRunner

from backbones.vit_tokens import sincos_pos_embed, vit_energy_with_pos
from engine import export_backbone
from pretexts.cli import main
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

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
        torch.testing.assert_close(exported(energy_model.normalize(images)),
                                   energy_model.backbone(energy_model.normalize(images)))
    # strict: the file holds exactly the model's keys
    file_state = timm.models.load_state_dict(str(tmp_path / f"backbone{suffix}"))
    assert set(file_state) == set(exported.state_dict())


def test_exported_patch_sorting_vit_carries_the_sincos_table(tmp_path):
    path, energy_model = write_checkpoint(tmp_path / "ckpt.pt", "vit_tiny", "patch-sorting", task_args={"edge_max": 1})
    info = export_backbone(str(path), str(tmp_path / "vit.safetensors"))
    assert info["kwargs"] == {"patch_size": 4, "img_size": 32} and info["timm_name"] == "vit_tiny_patch16_224"
    exported = timm_model(info)
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    table = sincos_pos_embed((8, 8), 192).expand(2, -1, -1)
    with torch.no_grad():  # the energy the checkpoint's sorting saw, from the plain timm ViT
        torch.testing.assert_close(energy_model.score(exported(energy_model.normalize(images))),
                                   vit_energy_with_pos(energy_model, images, table), atol=1e-5, rtol=1e-4)


def test_cli_export_prints_the_load_line_and_writes_its_json(tmp_path):
    path, _ = write_checkpoint(tmp_path / "ckpt.pt")
    out = tmp_path / "w" / "backbone.safetensors"
    result = CliRunner().invoke(main, ["export", "--checkpoint", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "timm.create_model('convnext_atto', pretrained=True" in result.output
    info = json.loads(out.with_suffix(".json").read_text())
    assert info["pretraining"]["task"] == "colorization" and info["parameters"] > 3_000_000 and out.is_file()
