"""What a budget point's snapshot shows beside its probes: the held-out restored / baseline error ratio and the top
principal component's share of the features' variance, measured as the pretraining measures them at the end of a
run (the method's held-out report and the monitor, on the same seeded images). Measured from each snapshot as it is
scored, a point reads the same whether its cell was pretrained to it or beyond it."""

import dataclasses
from pathlib import Path

from pretexts.engine.training.checkpoint import load_checkpoint, load_weights
from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.loop import Pretrainer


def held_out_ratio(held: dict) -> float | None:
    """A held-out report's (`HeldOut.to_dict()`) last output's error over its baseline's; None where either is
    missing or 0."""
    restored, baseline = held.get("restored_mse"), held.get("corrupted_mse")
    return restored[-1] / baseline if restored and baseline else None


def point_measures(cfg: PretrainConfig, checkpoint: Path) -> dict:
    """`held_out_ratio` (where the data has held-out images and the ratio is defined) and `top_pc_share` (where the
    run monitors) of the pretraining snapshot at `checkpoint`, which the run `cfg` wrote. The run is rebuilt eagerly
    (a compiled forward would cost more to compile than to measure) with the snapshot's weights."""
    trainer = Pretrainer(dataclasses.replace(cfg, compile=None, resume=None))
    weights = load_checkpoint(checkpoint, kinds=("pretrain",))["model"]
    load_weights(trainer.model, weights, checkpoint, f"a {cfg.backbone} {cfg.method} model", "was it edited?")
    measures = {}
    if trainer.val_set is not None:
        ratio = held_out_ratio(trainer.held_out_error().to_dict())
        measures |= {} if ratio is None else {"held_out_ratio": ratio}
    if cfg.monitor_every:
        measures["top_pc_share"] = trainer.build_monitor().measure_now()["top_pc_share"]
    return measures
