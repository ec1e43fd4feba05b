"""The Pretext base class and the Corrupted sample every task returns."""
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from .errors import ParameterError, suggest
from .params import Param


@dataclass
class Corrupted:
    """One corrupted batch.

    state:   what the restoration moves (pixels [B,3,H,W], or position embeddings [B,L,D]).
    target:  what the state must reach (the clean images, or the true embeddings).
    context: a fixed input beside the state (patch sorting: the image), else None.
    info:    the per-image parameters that were drawn (for figures and tests).
    """

    state: Tensor
    target: Tensor
    context: Tensor | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Pretext:
    """A corruption whose undoing is the pretext task.

    Subclasses declare `params` (name -> Param) and optional `presets` (name -> values), and
    implement `corrupt`. Tasks whose state is not pixels declare `state_kind` and override `energy` (and
    `bind` when they need to know the model).
    """

    name: ClassVar[str] = ""
    params: ClassVar[dict[str, Param]] = {}
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    # What restoration moves: "pixels" (the image [B,3,H,W]) or something else, e.g. "positions" (patch
    # sorting's position embeddings [B,L,D]); a task whose state is not pixels overrides `energy` and says so.
    state_kind: ClassVar[str] = "pixels"
    subtasks: tuple = ()  # the tasks a mixture draws from; each is checked on its own
    # What `trivial_restore` does, in a few words, for the reports ("visible-mean fill"); None: it has none.
    trivial_restorer: str | None = None

    def __init__(self, preset: str | None = None, **kwargs: Any):
        values = {k: p.default for k, p in self.params.items()}
        if preset is not None:
            if preset not in self.presets:
                known = ", ".join(self.presets) or "none"
                raise ParameterError(
                    f"{self.name}: unknown preset '{preset}'; presets: {known}.{suggest(preset, self.presets)}")
            values.update(self.presets[preset])
        for key in kwargs:
            if key not in self.params:
                valid = ", ".join(self.params) or "none"
                raise ParameterError(
                    f"{self.name}: unknown parameter '{key}'; valid parameters: {valid}.{suggest(key, self.params)}")
        values.update(kwargs)
        for key, value in values.items():
            setattr(self, key, self.params[key].convert(self.name, key, value))
        self.preset = preset
        self.check()

    def check(self) -> None:
        """Cross-parameter checks; raise ParameterError. Single ranges live in `params`."""

    def corrupt(self, images: Tensor, generator: torch.Generator | None = None) -> Corrupted:
        raise NotImplementedError

    def __call__(self, images: Tensor, generator: torch.Generator | None = None) -> Corrupted:
        """Corrupt a batch [B,3,H,W]: float in [0,1], or uint8 (converted here)."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ParameterError(
                f"{self.name}: images must be a batch [B, 3, H, W], got shape {tuple(images.shape)}.")
        if images.dtype == torch.uint8:
            images = images.float() / 255
        elif not images.is_floating_point():
            raise ParameterError(f"{self.name}: images must be float in [0, 1] or uint8, got {images.dtype}.")
        return self.corrupt(images, generator)

    def bind(self, model) -> "Pretext":
        """Check the task against the energy model before training; return self."""
        return self

    def energy(self, model, sample: Corrupted, state: Tensor) -> Tensor:
        """How a state enters the energy: as pixels by default. Returns energies [B]."""
        return model.energy(state)

    def trivial_restore(self, sample: Corrupted) -> Tensor | None:
        """What a restorer that learns nothing makes of the corrupted state (same shape as the target), or None
        where no such restorer applies (the default). The reports give its error beside the model's, so a
        model is never judged against the corrupted input alone. Tasks override it and name it in
        `trivial_restorer`; so may plugins."""
        return None

    def preview(self, sample: Corrupted, state: Tensor) -> Tensor:
        """An image [B,3,H,W] in [0,1] that shows a state, for figures."""
        return state.clamp(0, 1)

    def values(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.params}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.values().items())
        return f"{type(self).__name__}({args})"

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


def rand(shape, generator: torch.Generator | None, device, dtype=torch.float32) -> Tensor:
    """U(0,1) on `device` from `generator`, which must live on the same device."""
    return torch.rand(shape, generator=generator, device=device, dtype=dtype)


def uniform(shape, low: float, high: float, generator, device) -> Tensor:
    return low + (high - low) * rand(shape, generator, device)
