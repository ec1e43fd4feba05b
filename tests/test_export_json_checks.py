"""The .json beside an exported weights file is checked before timm sees it: a field that would reach the Hub, load
another file, or crash is refused in one line naming the .json and the field."""

import json
import re
import shutil

import pytest
from click.testing import CliRunner
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts.cli import main
from pretexts.engine import export_backbone
from pretexts.engine.evaluation.weights import load_backbone
from pretexts.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """(weights.pth of `pretexts export`, its .json as written)."""
    root = tmp_path_factory.mktemp("json_checks")
    ckpt, _ = write_checkpoint(root / "ckpt.pt", "test_convnext")
    info = export_backbone(str(ckpt), str(root / "weights.pth"))
    return root / "weights.pth", json.loads(json.dumps(info))


def with_json(export, tmp_path, **changes):
    """A copy of the export whose .json has `changes` (a value None: the field left out)."""
    weights, info = export
    path = tmp_path / "w.pth"
    shutil.copy(weights, path)
    written = {k: v for k, v in {**info, **changes}.items() if v is not None}
    path.with_suffix(".json").write_text(json.dumps(written))
    return path


REFUSED = {
    "hub name": ({"timm_name": "hf-hub:timm/resnet18.a1_in1k"}, "timm_name must be a timm model name without ':'"),
    "name not text": ({"timm_name": 5}, "timm_name must be a timm model name"),
    "another file": ({"kwargs": {"checkpoint_path": "/etc/passwd"}}, "kwargs may not hold checkpoint_path"),
    "pretrained": ({"kwargs": {"pretrained": True}}, "kwargs may not hold pretrained"),
    "pretrained_cfg": ({"kwargs": {"pretrained_cfg": "x"}}, "kwargs may not hold pretrained_cfg"),
    "overlay": ({"kwargs": {"pretrained_cfg_overlay": {"file": "/x"}}}, "kwargs may not hold pretrained_cfg_overlay"),
    "cache_dir": ({"kwargs": {"cache_dir": "/tmp"}}, "kwargs may not hold cache_dir"),
    "kwargs not a mapping": ({"kwargs": "abc"}, "kwargs must be a mapping"),
    "input_size a number": ({"input_size": 5}, "input_size must be a list of 3 positive integers"),
    "input_size text": ({"input_size": [3, "a", "b"]}, "input_size must be a list of 3 positive integers"),
    "input_size short": ({"input_size": [32, 32]}, "input_size must be a list of 3 positive integers"),
    "mean short": ({"mean": [0.5, 0.5]}, "mean must be a list of 3 numbers"),
    "std zero": ({"std": [0.2, 0.0, 0.2]}, "std must be a list of 3 positive numbers"),
    "std text": ({"std": "0.2"}, "std must be a list of 3 positive numbers"),
    "crop negative": ({"crop_pct": -0.5}, "crop_pct must be a positive number"),
    "crop zero": ({"crop_pct": 0}, "crop_pct must be a positive number"),
    "interpolation": ({"interpolation": "cubic"}, "interpolation must be one of timm's nearest, bilinear, bicubic"),
    "crop_mode": ({"crop_mode": "fill"}, "crop_mode must be one of timm's center, squash, border"),
}


@pytest.mark.parametrize("changes, says", REFUSED.values(), ids=REFUSED)
def test_a_malformed_or_hostile_export_json_is_refused_naming_the_file_and_field(export, tmp_path, changes, says):
    path = with_json(export, tmp_path, **changes)
    with pytest.raises(CheckpointError, match=re.escape(f"'{tmp_path / 'w.json'}': its ") + says) as err:
        load_backbone(str(path))
    assert "\n" not in str(err.value) and str(err.value).endswith("write it again with `pretexts export`.")


def test_an_export_json_as_written_and_one_without_the_preprocessing_load(export, tmp_path):
    weights, info = export
    assert load_backbone(str(weights)).model.pretrained_cfg["input_size"] == (3, 32, 32)
    older = with_json(export, tmp_path, crop_pct=None, interpolation=None, crop_mode=None)  # an earlier export's
    assert load_backbone(str(older)).model.pretrained_cfg["input_size"] == (3, 32, 32)
    wide = with_json(export, tmp_path, crop_pct=1.15)  # what export writes for volo_d4_448, timm's default
    assert load_backbone(str(wide)).model.pretrained_cfg["crop_pct"] == 1.15


def test_probe_refuses_a_hub_name_in_one_line_without_reaching_the_network(export, tmp_path, monkeypatch):
    path = with_json(export, tmp_path, timm_name="hf-hub:timm/resnet18.a1_in1k")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # were the name passed on, timm would fail at once, not be refused
    args = ["probe", "--checkpoint", str(path), "--data", "sample", "--probe", "knn", "--out", str(tmp_path / "p")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "w.json': its timm_name must be a timm model name without ':'" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
