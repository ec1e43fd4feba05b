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


class PointMeasures:
    """`measures(checkpoint)`: `held_out_ratio` (where the data has held-out images and the ratio is defined) and
    `top_pc_share` (where the run monitors) of a pretraining snapshot that the run `cfg` wrote. The run is rebuilt
    once per cell, eagerly (a compiled forward would cost more to compile than to measure), on the first snapshot;
    each snapshot's weights are then loaded into it."""

    def __init__(self, cfg: PretrainConfig):
        self.cfg, self.trainer, self.monitor = cfg, None, None

    def __call__(self, checkpoint: Path) -> dict:
        cfg = self.cfg
        if self.trainer is None:  # reading the data, the model and the monitor's images once, not once a point
            self.trainer = Pretrainer(dataclasses.replace(cfg, compile=None, resume=None))
            self.monitor = self.trainer.build_monitor() if cfg.monitor_every else None
        weights = load_checkpoint(checkpoint, kinds=("pretrain",))["model"]
        load_weights(self.trainer.model, weights, checkpoint, f"a {cfg.backbone} {cfg.method} model", "was it edited?")
        measures = {}
        if self.trainer.val_set is not None:
            ratio = held_out_ratio(self.trainer.held_out_error().to_dict())
            measures |= {} if ratio is None else {"held_out_ratio": ratio}
        if self.monitor is not None:
            measures["top_pc_share"] = self.monitor.measure_now()["top_pc_share"]
        return measures
