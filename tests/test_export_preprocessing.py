"""An export carries the fine-tune's evaluation: timm's own data config, read from the folder or from a weights file's
load line, rebuilds `eval_transform` (bicubic, the run's crop), so timm's eval transform scores the recorded top-1."""

import json

import pytest
import timm
import torch
from pretrained_checkpoints import single_thread  # noqa: F401 (a fixture)
from timm.data import create_transform, resolve_data_config, resolve_model_data_config

from pretexts.backbones.normalisation import normalisation
from pretexts.engine import FinetuneConfig, export_backbone, finetune, load_checkpoint
from pretexts.engine.data.labelled_data import eval_transform
from pretexts.engine.evaluation.pretrained import downstream_splits
from pretexts.engine.evaluation.weights import load_backbone
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

CROP = 0.5  # neither the small recipe's 1.0 nor test_resnet's 0.95: a 32 px image is resized to 64, then cropped


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 40-step fine-tune of test_resnet (timm's default: bilinear, crop 0.95) on the sample, scored at CROP."""
    out = tmp_path_factory.mktemp("export_pre") / "ft"
    cfg = FinetuneConfig(
        from_scratch=True,
        backbone="test_resnet",
        data="sample",
        recipe="small",
        epochs=2,  # enough that predictions vary by image, so another resize or crop changes the top-1
        max_steps_per_epoch=20,
        batch_size=16,
        workers=0,
        randaug="none",
        crop_pct=CROP,
        out=str(out),
    )
    finetune(cfg, echo=lambda line: None)
    return out


def exported(run, out) -> tuple[torch.nn.Module, dict]:
    """(the model as timm alone loads it: the folder's local-dir: call, or the file's load line run as written, its
    pretexts.json or .json)."""
    info = export_backbone(str(run / "finetuned.pt"), str(out))
    return eval(info["load"], {"timm": timm}).eval(), info


@pytest.mark.parametrize("out", ["folder", "weights.safetensors", "weights.pth"])
def test_timm_resolves_the_fine_tunes_evaluation_from_an_export(run, tmp_path, out):
    model, info = exported(run, tmp_path / out)
    expected = eval_transform(32, *normalisation(model), CROP)  # what finetune scored val_top1 with
    for resolved in (
        resolve_data_config(model=model),
        resolve_model_data_config(model),
        resolve_data_config(model=model, use_test_size=True),  # timm's validate.py's default
    ):
        assert resolved["interpolation"] == "bicubic" and resolved["crop_pct"] == CROP
        assert resolved["input_size"] == (3, 32, 32) and resolved["crop_mode"] == "center"
        assert repr(create_transform(**resolved)) == repr(expected)
    assert (info["crop_pct"], info["interpolation"], info["crop_mode"]) == (CROP, "bicubic", "center")


def test_timm_eval_transform_on_a_weights_file_reproduces_the_recorded_top1(run, tmp_path):
    model, info = exported(run, tmp_path / "weights.safetensors")
    transform = create_transform(**resolve_data_config(model=model))
    _, val = downstream_splits("sample", "given", 32, 0)
    images = torch.stack([transform(image.convert("RGB")) for image, _ in val])
    labels = torch.tensor([label for _, label in val])
    with torch.no_grad():
        top1 = 100.0 * (model(images).argmax(1) == labels).sum().item() / len(labels)
    assert top1 == pytest.approx(info["fine_tuned"]["val_top1"], abs=1e-9)


def test_probe_reads_the_crop_and_interpolation_back_from_a_weights_files_json(run, tmp_path):
    _, info = exported(run, tmp_path / "weights.pth")
    cfg = load_backbone(str(tmp_path / "weights.pth")).model.pretrained_cfg
    assert (cfg["crop_pct"], cfg["interpolation"], cfg["input_size"]) == (CROP, "bicubic", (3, 32, 32))
    assert json.loads((tmp_path / "weights.json").read_text())["load"] == info["load"]


def test_a_fine_tuned_checkpoint_naming_a_hub_model_is_refused_before_timm_is_called(run, tmp_path):
    ckpt = load_checkpoint(run / "finetuned.pt")
    ckpt["timm"]["name"] = "hf-hub:timm/resnet18.a1_in1k"
    save_checkpoint(ckpt, tmp_path / "hub.pt")
    with pytest.raises(CheckpointError, match=r"hub\.pt'.*timm\.name must be a timm model name without ':'") as err:
        export_backbone(str(tmp_path / "hub.pt"), str(tmp_path / "out"))
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()
