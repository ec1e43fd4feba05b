"""`--schedule auto`, the fast recipe's: cosine to the planned end for the energy method on a ViT planned past the
demo's steps, constant otherwise; config.json records what it resolved to (with what loss=auto and positions=auto
resolved to), and a resume keeps it."""

import json

import pytest
import torch
from test_resume import assert_resume_is_exact, config

from pretexts.backbones import create_backbone
from pretexts.backbones.vit_tokens import sincos_pos_embed
from pretexts.engine import PretrainConfig, Pretrainer, load_checkpoint
from pretexts.engine.training import recipes
from pretexts.engine.training.recipes import DEMO_STEPS, resolved_schedule


def built(name: str):
    with torch.device("meta"):
        return create_backbone(name, img_size=32)


@pytest.mark.parametrize(
    "method, backbone, steps, expected",
    [
        ("energy", "vit_tiny", DEMO_STEPS + 1, "cosine"),
        ("energy", "vit_tiny", DEMO_STEPS, "constant"),  # the demo's length keeps its constant lr
        ("energy", "convnext_atto", 10 * DEMO_STEPS, "constant"),
        ("mae", "vit_tiny", 10 * DEMO_STEPS, "constant"),
    ],
)
def test_auto_decays_a_long_energy_run_on_a_vit_only(method, backbone, steps, expected):
    assert resolved_schedule("auto", method, built(backbone), steps) == expected
    for given in ("cosine", "constant"):  # a schedule given explicitly is kept
        assert resolved_schedule(given, method, built(backbone), steps) == given


def test_the_fast_recipe_asks_for_auto_and_the_paper_recipe_for_cosine():
    assert PretrainConfig().schedule == "auto" and PretrainConfig(recipe="paper").schedule == "cosine"


def lrs(out) -> list:
    return [json.loads(line)["lr"] for line in (out / "log.jsonl").read_text().splitlines()]


def test_a_long_vit_run_records_its_resolved_defaults_decays_and_resumes_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(recipes, "DEMO_STEPS", 4)  # these 6-step runs stand for one planned past the demo
    assert_resume_is_exact(lambda name, **extra: config(tmp_path / name, 3, "test_vit", **extra))
    for name in ("straight", "split"):
        saved = json.loads((tmp_path / name / "config.json").read_text())
        assert saved["schedule"] == "cosine"
        assert [saved["method_args"][k] for k in ("loss", "loss_patch", "positions")] == [
            "patch-centred",
            None,
            "sincos",
        ]
        positions = load_checkpoint(tmp_path / name / "checkpoint.pt")["model"]["backbone.pos_embed"]
        torch.testing.assert_close(positions[0, 1:], sincos_pos_embed((2, 2), 64))  # frozen through the run
    run = tmp_path / "straight"
    decay = lrs(run)[2:]  # after the 1-epoch (2-step) warm-up
    assert len(decay) == 4 and decay == sorted(decay, reverse=True) and decay[0] > decay[-1]
    assert recipes.schedule_line("auto", "cosine", 6).startswith("schedule auto: cosine to step 6")
    assert recipes.schedule_line("cosine", "cosine", 6) is None  # a schedule given is not announced


def test_a_resume_keeps_the_schedule_auto_chose_at_the_start(tmp_path, monkeypatch):
    """A run that `auto` held constant stays constant when a resume plans it past the threshold (and the other way):
    the schedule is chosen once, as the run starts, and a resume continues it."""
    monkeypatch.setattr(recipes, "DEMO_STEPS", 4)
    out = tmp_path / "run"
    Pretrainer(config(out, 2, "test_vit")).run()  # 4 steps: constant
    assert json.loads((out / "config.json").read_text())["schedule"] == "constant"
    longer = Pretrainer(config(out, 3, "test_vit", resume="auto"))  # 6 steps planned: auto alone would say cosine
    assert (
        longer.record.schedule == "constant"
        and longer.schedule_note == "schedule auto: constant, as the resumed run chose when it started"
    )
    longer.run()
    assert json.loads((out / "config.json").read_text())["schedule"] == "constant"
    assert len(set(lrs(out)[2:])) == 1  # the lr after the warm-up stays where it was
