"""The method registry: built-in pretraining methods register at definition, a third party's through the
entry-point group `pretexts.methods`, as tasks do through `pretexts.tasks` (the same `Registry`).

A method is a `Pretrainer` subclass (engine/pretrain.py) decorated with `@register_method(name)`; it may
override `build_model`, `corrupt`, `compute_loss`, `held_out_error` and `figure`, and declare its
`--method-arg` options in `method_params`. `pretexts train --method NAME` builds it by name.
"""
from pretexts.registry import Registry

METHODS = Registry("method", "pretexts.methods", ("engine.pretrain", "engine.autoencoder", "engine.mae"),
                   hint="Methods: {names} (`pretexts list --methods`).")
TRAINERS = METHODS.table  # method name -> trainer class
register_method = METHODS.register


def list_methods() -> dict[str, type]:
    """Method name -> trainer class, built-ins first, then plugins."""
    METHODS.load()
    return dict(TRAINERS)


def create_trainer(cfg):
    """The trainer of `cfg.method`, built from `cfg`."""
    return METHODS.get(cfg.method)(cfg)
