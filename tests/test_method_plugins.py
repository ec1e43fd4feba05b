"""A third-party pretraining method, added in one file through the `pretexts.methods` entry-point group, trains
from the CLI beside the built-ins; a broken or name-clashing method plugin breaks nothing."""

import json

import pytest
from click.testing import CliRunner
from plugin_installs import plugin_installer

from pretexts.cli import main
from pretexts.engine import methods

ROTATION = '''
    """Rotation prediction (Gidaris et al. 2018) as a pretexts method: one file, registered by entry point."""
    import torch
    import torch.nn.functional as F

    from pretexts import backbones
    from pretexts.engine import Figure, HeldOut, Method, register_method
    from pretexts.params import Param


    class RotationModel(torch.nn.Module):
        def __init__(self, backbone):
            super().__init__()
            self.backbone, self.head = backbone, torch.nn.Linear(backbone.num_features, 4)

        def forward(self, images):
            return self.head(self.backbone(images))


    @register_method("rotation")
    class Rotation(Method):
        """Predict which of 4 quarter turns each image was given."""

        method_params = {"turns": Param(4, int, 2, 4, help="how many quarter turns are drawn")}

        def build_model(self):
            return RotationModel(backbones.create_backbone(self.cfg.backbone, img_size=self.cfg.img_size))

        def corruption(self):
            return f"random quarter turns (of {self.args['turns']})"

        def corrupt(self, images, generator):
            turns = torch.randint(self.args["turns"], (images.shape[0],), generator=generator)
            rotated = torch.stack([torch.rot90(x, int(k), (1, 2)) for x, k in zip(images, turns)])
            return rotated, turns

        def loss(self, sample):
            rotated, turns = sample
            return F.cross_entropy(self.model(rotated), turns)

        def held_out_error(self, batches):
            wrong = count = 0
            generator = torch.Generator().manual_seed(self.cfg.seed)
            with torch.no_grad():
                for images in batches:
                    rotated, turns = self.corrupt(images, generator)
                    wrong += (self.model.eval()(rotated).argmax(1) != turns).sum().item()
                    count += images.shape[0]
            self.model.train()
            chance = 1 - 1 / self.args["turns"]
            return HeldOut(count, chance, [wrong / count], ("predicted",), result="predicted",
                           measure="rotation error rate", baseline="chance", against="chance", method="rotation")

        def figure(self, images):
            rotated, _ = self.corrupt(images, torch.Generator().manual_seed(0))
            return Figure({"rotated": rotated, "original": images}, self.default_title())
'''


@pytest.fixture
def method_plugin(tmp_path):
    """Installs method plugin distributions (module, dist-info, entry point) for one test; removed after it."""
    with plugin_installer(tmp_path, methods.METHODS, "pretexts.methods") as install:
        yield install


def test_a_method_plugin_is_listed_and_trains_from_the_cli(method_plugin, tmp_path):
    method_plugin("pretexts_rotation", ROTATION, "rotation = pretexts_rotation:Rotation")
    methods.METHODS.load(force=True)
    listed = CliRunner().invoke(main, ["list", "--methods"])
    assert (
        "rotation           Predict which of 4 quarter turns each image was given. [plugin pretexts_rotation 1.0]"
        in listed.output
    ), listed.output
    assert "--method-arg turns=...  int in [2, 4], default 4" in listed.output
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        [
            "train",
            "--method",
            "rotation",
            "--method-arg",
            "turns=4",
            "--backbone",
            "test_convnext",
            "--batch-size",
            "16",
            "--epochs",
            "2",
            "--workers",
            "0",
            "--max-steps-per-epoch",
            "3",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert len(log) == 6 and all(row["loss"] > 0 for row in log)
    held = json.loads((out / "results.json").read_text())["held_out"]
    assert held["method"] == "rotation" and 0 <= held["restored_mse"][0] <= 1
    assert "held-out rotation error rate on 80 images: chance 0.75000 -> predicted" in result.output
    assert "--turns" in CliRunner().invoke(main, ["train", "--method", "rotation", "--help"]).output
    assert "pretraining test_convnext on random quarter turns (of 4)" in result.output
    assert (out / "restoration_epoch002.png").is_file() and (out / "checkpoint.pt").is_file()
    bad = CliRunner().invoke(
        main, ["train", "--method", "rotation", "--method-arg", "turns=9", "--out", str(tmp_path / "bad")]
    )
    assert bad.exit_code == 2 and "allowed range is [2, 4]" in bad.output


def test_a_broken_or_clashing_method_plugin_breaks_nothing(method_plugin, tmp_path):
    method_plugin("method_broken", "raise ImportError('needs faiss')\n", "clusters = method_broken:Trainer")
    method_plugin(
        "method_dup",
        """
        from pretexts.engine import Method, register_method

        @register_method("ae")
        class Mine(Method):
            '''Another ae.'''
        """,
        "ae = method_dup:Mine",
    )
    with pytest.warns(UserWarning, match="the built-in wins"):
        methods.METHODS.load(force=True)
    listed = CliRunner().invoke(main, ["list", "--methods"])
    assert "clusters           BROKEN plugin: method_broken 1.0" in listed.output and "needs faiss" in listed.output
    assert methods.METHODS.table["ae"].__module__ == "pretexts.engine.methods.autoencoder"
    assert "ae                 IGNORED plugin (the built-in 'ae' wins): method_dup 1.0" in listed.output
    result = CliRunner().invoke(main, ["train", "--method", "clusters", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "comes from a plugin that failed to load" in result.output
    assert "method_broken.py:1: ImportError: needs faiss" in result.output
    typo = CliRunner().invoke(main, ["train", "--method", "mea", "--out", str(tmp_path / "y")])
    assert typo.exit_code == 2 and "Did you mean: mae?" in typo.output
