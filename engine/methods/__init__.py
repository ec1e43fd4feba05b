"""Pretraining methods, one file each: energy (the paper's), ae (the autoencoder baseline), mae (He et al.).

A method is a `Method` subclass (engine/methods/base.py) decorated with `@register_method(name)`; a third
party's registers through the entry-point group `pretexts.methods`, as a task does through `pretexts.tasks`
(the same `Registry`, pretexts/registry.py). `pretexts train --method NAME` trains it.
"""

from pretexts.registry import METHODS

from .base import Method

register_method = METHODS.register


def list_methods() -> dict[str, type]:
    """Method name -> `Method` class, built-ins first, then plugins."""
    METHODS.load()
    return dict(METHODS.table)


__all__ = ["METHODS", "Method", "register_method", "list_methods"]
