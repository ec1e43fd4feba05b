"""`pretexts segment` gives the backbone MAE's and BEiT's ADE20K drop path (0.1) unless `--drop-path` says
otherwise, as timm's `drop_path_rate`; a value outside [0, 1) is one line."""

from pathlib import Path

import pytest
from cli_runs import fails_cleanly, one_torch_thread, run_cli  # noqa: F401 (autouse)
from timm.layers import DropPath

from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.evaluation.segmentation.train import Segmentation
from pretexts.errors import ParameterError


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(write_generated(tmp_path_factory.mktemp("seg") / "d", 4, 2, 32))


def segment_args(data, out) -> list:
    return ["segment", "--from-scratch", "--backbone", "vit_tiny", "--img-size", "32", "--head", "linear"] + [
        "--data",
        data,
        "--out",
        out,
    ]


def built_by_the_cli(monkeypatch, args) -> Segmentation:
    """The Segmentation `pretexts segment ARGS` builds, stopped before its first step."""
    built = []

    def stop(self):
        built.append(self)
        Path(self.cfg.out).mkdir(parents=True, exist_ok=True)  # as a run leaves it, for the CLI's last line
        return {"val_images": 0, "num_classes": 0, "eval_mode": "whole", "miou_percent": 0, "pixel_acc_percent": 0}

    monkeypatch.setattr(Segmentation, "run", stop)
    result, error = run_cli(args)
    assert result.exit_code == 0 and not error, result.output
    return built[0]


def drop_rates(segmentation: Segmentation) -> list[float]:
    return [m.drop_prob for m in segmentation.model.features.backbone.modules() if isinstance(m, DropPath)]


def test_the_backbone_has_drop_path_0_1_by_default_and_none_with_drop_path_0(data, tmp_path, monkeypatch):
    default = built_by_the_cli(monkeypatch, segment_args(data, tmp_path / "a"))
    assert default.cfg.drop_path == 0.1
    assert max(drop_rates(default)) == pytest.approx(0.1)  # timm's rule: rising with depth to 0.1 at the last block
    off = built_by_the_cli(monkeypatch, [*segment_args(data, tmp_path / "b"), "--drop-path", "0"])
    assert off.cfg.drop_path == 0 and drop_rates(off) == []


def test_a_drop_path_outside_0_to_1_is_one_line(data, tmp_path):
    fails_cleanly([*segment_args(data, tmp_path / "c"), "--drop-path", "1"], "--drop-path", "[0, 1)")
    with pytest.raises(ParameterError, match=r"drop_path.*\[0, 1\)"):
        SegmentConfig(data=data, backbone="vit_tiny", drop_path=1.0)


def test_a_config_saved_before_drop_path_existed_resumes_without_it():
    saved = SegmentConfig(data="generated", backbone="vit_tiny").to_dict()
    del saved["drop_path"]
    assert SegmentConfig.from_dict(saved).drop_path == 0
    assert SegmentConfig.from_dict({**saved, "drop_path": 0.1}).drop_path == 0.1
