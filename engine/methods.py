"""The method registry: built-in pretraining methods register at definition, a third party's through the
entry-point group `pretexts.methods`, as tasks do through `pretexts.tasks` (the same `Registry`).

A method is a `Pretrainer` subclass (engine/pretrain.py) decorated with `@register_method(name)`; it may
override `build_model`, `corrupt`, `compute_loss`, `held_out_error` and `figure`, and declare its
`--method-arg` options in `method_params`. `pretexts train --method NAME` builds it by name.
"""
from pretexts.errors import ParameterError, UnknownNameError
from pretexts.registry import Registry

METHODS = Registry("method", "pretexts.methods", ("engine.pretrain", "engine.autoencoder", "engine.mae"))
TRAINERS = METHODS.table  # method name -> trainer class
register_method = METHODS.register


def load_method_plugins(force: bool = False) -> None:
    METHODS.load(force)


def list_methods() -> dict[str, type]:
    """Method name -> trainer class, built-ins first, then plugins."""
    METHODS.load()
    return dict(TRAINERS)


def broken_methods() -> dict[str, str]:
    METHODS.load()
    return dict(METHODS.broken)


def method_plugin_of(name: str) -> str | None:
    """'pretexts-rotation 1.0' for a method a plugin registered; None for a built-in."""
    METHODS.load()
    return METHODS.plugin_of.get(name)


def create_trainer(cfg):
    """The trainer of `cfg.method`, built from `cfg`."""
    try:
        trainer = METHODS.get(cfg.method)
    except UnknownNameError as err:
        if cfg.method in METHODS.broken:
            raise
        raise ParameterError(f"{err} Methods: {', '.join(TRAINERS)}.") from None
    return trainer(cfg)
