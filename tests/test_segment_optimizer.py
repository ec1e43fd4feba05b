"""`pretexts segment`'s optimiser follows BEiT's and MAE's ADE20K LayerDecayOptimizerConstructor: the decode head
(pyramid included) at the full lr, the backbone's top block at layer_decay ** 1, down to the embeddings at
layer_decay ** (depth + 1), the slots `finetune` gives them; and no weight decay on 1-D parameters, biases (the
decode head's too) or the backbone's `no_weight_decay()` names."""

import pytest
from cli_runs import one_torch_thread  # noqa: F401 (autouse)

from pretexts.engine.evaluation.segmentation.config import SegmentConfig
from pretexts.engine.evaluation.segmentation.generate import write_generated
from pretexts.engine.evaluation.segmentation.train import Segmentation

RATE = 0.65  # the segment default, BEiT's and MAE's ADE20K layer decay


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return str(write_generated(tmp_path_factory.mktemp("seg") / "d", 4, 2, 32))


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    """The real Segmentation of each backbone, built as `pretexts segment` builds it, and not run."""
    out = tmp_path_factory.mktemp("out")
    return {
        name: Segmentation(
            SegmentConfig(data=data, backbone=name, img_size=32, head="upernet", max_steps=1, out=str(out / name))
        )
        for name in ("vit_tiny", "resnet18")
    }


def groups_of(run: Segmentation) -> dict[str, tuple[float, float]]:
    """Parameter name -> (lr / the configured lr, weight decay) of the optimiser, after the scheduler's first set."""
    run.scheduler.step_update(0)
    names = {id(p): n for n, p in run.model.named_parameters()}
    return {
        names[id(p)]: (g["lr"] / run.cfg.lr, g["weight_decay"]) for g in run.optimizer.param_groups for p in g["params"]
    }


@pytest.mark.parametrize(
    "backbone, expected",
    [
        (
            "vit_tiny",  # 12 blocks: BEiT's num_layers = depth + 2
            {
                "features.backbone.pos_embed": RATE**13,
                "features.backbone.cls_token": RATE**13,
                "features.backbone.patch_embed.proj.weight": RATE**13,
                "features.backbone.blocks.0.attn.qkv.weight": RATE**12,
                "features.backbone.blocks.10.mlp.fc1.weight": RATE**2,
                "features.backbone.blocks.11.mlp.fc1.weight": RATE,
                "features.backbone.norm.weight": RATE,  # timm's matcher puts the final norm with the top block
                "features.pyramid.0.0.weight": 1.0,
                "head.classify.weight": 1.0,
            },
        ),
        (
            "resnet18",  # stem, then 8 basic blocks
            {
                "features.backbone.conv1.weight": RATE**9,
                "features.backbone.layer1.0.conv1.weight": RATE**8,
                "features.backbone.layer4.0.conv1.weight": RATE**2,
                "features.backbone.layer4.1.conv2.weight": RATE,
                "head.classify.weight": 1.0,
            },
        ),
    ],
)
def test_layer_decay_counts_the_decode_head_as_the_top_layer(runs, backbone, expected):
    groups = groups_of(runs[backbone])
    for name, scale in expected.items():
        assert groups[name][0] == pytest.approx(scale, rel=1e-6), (name, groups[name][0], scale)
    decode = [scale for name, (scale, _) in groups.items() if not name.startswith("features.backbone.")]
    assert decode and all(scale == pytest.approx(1.0) for scale in decode)


@pytest.mark.parametrize("backbone", ["vit_tiny", "resnet18"])
def test_weight_decay_spares_biases_norms_and_the_backbones_no_weight_decay_names(runs, backbone):
    run = runs[backbone]
    params = dict(run.model.named_parameters())
    groups = groups_of(run)
    assert set(groups) == set(params)  # every parameter is trained, once
    backbone_model = run.model.features.backbone
    named = backbone_model.no_weight_decay() if hasattr(backbone_model, "no_weight_decay") else ()
    skip = {f"features.backbone.{n}" for n in named} & set(params)
    for name, (_, decay) in groups.items():
        exempt = params[name].ndim <= 1 or name.endswith(".bias") or name in skip
        assert decay == (0.0 if exempt else run.cfg.weight_decay), (name, decay)
    if backbone == "vit_tiny":
        assert {"features.backbone.cls_token", "features.backbone.pos_embed"} <= skip
    assert groups["head.classify.bias"][1] == 0.0
