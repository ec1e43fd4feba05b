"""The Pretext base class and the Corrupted sample every task returns."""

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from .errors import ParameterError, suggest
from .listing_cache import first_paragraph
from .params import AUTO, Param

RANGE_SLACK = 1e-3  # float images a resize or colour op left a rounding step outside [0, 1] are still images


@dataclass
class Corrupted:
    """One corrupted batch: what a task returns, and what a method restores.

    Args:
        state: What the restoration moves: the corrupted images, or a state of the task's own `state_kind`
            (patch sorting's position embeddings).
        target: What the state must reach: the clean images, or the true embeddings.
        context: A fixed input beside the state (patch sorting: the image), else None.
        info: The per-image parameters that were drawn (for figures and tests). A task that leaves some pixels
            as they were says which in `info["mask"]`, a `(B, H, W)` bool tensor True on the corrupted pixels:
            the energy method's figure then adds a "step N, known pixels kept" column (the last step with those
            pixels put back) and its held-out report a `known_kept_mse`; training never reads it.

    Shape:
        - state: `(B, 3, H, W)` float for pixel tasks: in [0, 1] for the masks, colorization and super-resolution,
          unbounded for denoising (not clamped) and a mixture that draws it; `(B, L, D)` for patch sorting.
        - target: the shape of `state`.
        - info["mask"]: `(B, H, W)` bool, where a task gives it.

    Examples:
        >>> import torch
        >>> from pretexts import Corrupted
        >>> images = torch.rand(2, 3, 8, 8)
        >>> mask = torch.zeros(2, 8, 8, dtype=torch.bool)
        >>> mask[:, :4] = True  # the top half is blanked
        >>> sample = Corrupted(state=images.masked_fill(mask.unsqueeze(1), 0.5), target=images, info={"mask": mask})
        >>> sample.state.shape, sample.context is None
        (torch.Size([2, 3, 8, 8]), True)
    """

    state: Tensor
    target: Tensor
    context: Tensor | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Pretext:
    """A corruption whose undoing is the pretext task.

    Subclasses declare `params` (name -> Param) and optional `presets` (name -> values), and implement the
    two halves of a corruption (Kornia's split): `draw` (the per-image random parameters, from the generator
    alone) and `apply` (the corruption those parameters give, deterministic). `corrupt` does both; a task may
    override `corrupt` alone instead (it then has no replayable parameters). A task is a pure corruption: it
    knows no model. A state that is not pixels is declared by `state_kind`; how such a state enters a model is
    the model side's concern (pretexts.engine.methods.states).

    Declared `params` become attributes of the task, converted and range-checked on construction; `check()` then
    checks what involves several of them (low <= high). The first paragraph of the class docstring, on one line,
    is the task's summary in `pretexts list`. `pretexts.register(name)` makes the class creatable by name.

    Args:
        preset: One of the class's `presets`, whose values replace the declared defaults.
        **kwargs: Values of declared `params`, over the preset's; strings are converted (as from the CLI). A
            parameter declared `scaled` left out (or "auto") follows the image size (`fit`).

    Raises:
        ParameterError: An unknown preset or parameter (close names suggested), a value outside its declared
            range, or a `check()` that fails.

    Examples:
        >>> import torch
        >>> from pretexts import Corrupted, Param, ParameterError, Pretext
        >>> from pretexts.base import uniform
        >>> class Dim(Pretext):
        ...     '''Darken each image by a random factor; restoration brightens it back.'''
        ...
        ...     name = "dim"
        ...     params = {"low": Param(0.2, float, 0.0, 1.0), "high": Param(0.6, float, 0.0, 1.0)}
        ...
        ...     def check(self):
        ...         if self.low > self.high:
        ...             raise ParameterError(f"{self.name}: low={self.low} must be <= high={self.high}.")
        ...
        ...     def draw(self, images, generator=None):
        ...         return {"factor": uniform((images.shape[0],), self.low, self.high, generator, images.device)}
        ...
        ...     def apply(self, images, params):
        ...         state = images * params["factor"].view(-1, 1, 1, 1)
        ...         return Corrupted(state=state, target=images, info=params)
        >>> task = Dim(high="0.5")
        >>> task.low, task.high
        (0.2, 0.5)
        >>> sample = task(torch.ones(2, 3, 8, 8), torch.Generator().manual_seed(0))
        >>> bool((sample.state <= 0.5).all()), sample.info["factor"].shape
        (True, torch.Size([2]))
        >>> Dim(low=0.9)
        Traceback (most recent call last):
        ...
        pretexts.errors.ParameterError: dim: low=0.9 must be <= high=0.6.
    """

    name: ClassVar[str] = ""
    params: ClassVar[dict[str, Param]] = {}
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    # What restoration moves: "pixels" (the image [B,3,H,W]) or something else, e.g. "positions" (patch
    # sorting's position embeddings [B,L,D]); the model side picks the state adapter by this name.
    state_kind: ClassVar[str] = "pixels"
    subtasks: tuple = ()  # the tasks a mixture draws from; each is checked on its own
    # True: the corruption hides boxes of pixels and keeps the rest as they were (the masks); on a ViT the energy's
    # --loss auto then picks the patch-centred loss. A mixture takes it from its parts.
    masking: ClassVar[bool] = False
    # What `trivial_restore` does, in a few words, for the reports ("visible-mean fill"); None: it has none.
    trivial_restorer: str | None = None

    def __init__(self, preset: str | None = None, **kwargs: Any):
        values = {k: p.default for k, p in self.params.items()}
        if preset is not None:
            if preset not in self.presets:
                known = ", ".join(self.presets) or "none"
                raise ParameterError(
                    f"{self.name}: unknown preset '{preset}'; presets: {known}.{suggest(preset, self.presets)}"
                )
            values.update(self.presets[preset])
        for key in kwargs:
            if key not in self.params:
                valid = ", ".join(self.params) or "none"
                raise ParameterError(
                    f"{self.name}: unknown parameter '{key}'; valid parameters: {valid}.{suggest(key, self.params)}"
                )
        values.update(kwargs)
        given = {**(self.presets[preset] if preset is not None else {}), **kwargs}
        # scaled parameters left unset (or "auto") follow the images: resolved by `fit`, None until then
        self.auto = {k for k, p in self.params.items() if p.scaled and given.get(k, AUTO) in (AUTO, None)}
        for key, value in values.items():
            setattr(self, key, None if key in self.auto else self.params[key].convert(self.name, key, value))
        self.preset = preset
        self.fitted: tuple[int, int] | None = None
        self.check()

    def fit(self, images: Tensor | int) -> "Pretext":
        """Size the task to `images` (a batch, or a side in pixels): each scaled parameter left unset takes the
        paper's value at 224 px scaled to this size, and one given must fit it (a one-line ParameterError naming
        a value that does). Tasks with scaled parameters call it at every draw and apply; it is cheap."""
        size = (images, images) if isinstance(images, int) else tuple(images.shape[-2:])
        if size != self.fitted:
            for key, param in self.params.items():
                if key in self.auto:
                    setattr(self, key, param.scaled_default(min(size)))
                elif param.scaled:
                    param.check_size(self.name, key, getattr(self, key), *size)
            self.fitted = size
        return self

    def sizes(self, side: int) -> dict[str, Any]:
        """The scaled parameters left to follow the images, as they resolve at `side` px (a checkpoint records them,
        so a resumed run notices when the scaling rule it was trained under has changed)."""
        self.fit(side)
        return {key: getattr(self, key) for key in sorted(self.auto)}

    def check(self) -> None:
        """Cross-parameter checks, run at the end of construction; a task overrides it to raise a ParameterError
        (e.g. low > high). Single ranges live in `params`.

        Raises:
            ParameterError: The parameters do not go together.
        """

    def draw(self, images: Tensor, generator: torch.Generator | None = None) -> dict[str, Any]:
        """The per-image random parameters of a corruption of `images` (tensors on the images' device, drawn from
        `generator` only, in a fixed order). A task that draws nothing returns {} (the default).

        Args:
            images: The clean batch.
            generator: The only source of randomness, on the images' device; None: torch's global one.

        Returns:
            Name -> tensor (or value), what `apply` reads.

        Shape:
            - images: `(B, 3, H, W)` float in [0, 1].
        """
        return {}

    def apply(self, images: Tensor, params: dict[str, Any]) -> Corrupted:
        """Corrupt `images` [B,3,H,W] with the parameters `draw` gave; draws nothing.

        Args:
            images: The clean batch.
            params: What `draw` returned for it.

        Returns:
            The corrupted sample; its `info` holds what a figure or a test reads (the drawn parameters,
            `info["mask"]` for the pixels corrupted).

        Shape:
            - images: `(B, 3, H, W)` float in [0, 1].
        """
        raise NotImplementedError(f"{self.name}: a task implements `draw` and `apply` (or overrides `corrupt`).")

    def corrupt(self, images: Tensor, generator: torch.Generator | None = None) -> Corrupted:
        """One seeded corruption: draw the parameters, then apply them."""
        return self.apply(images, self.draw(images, generator))

    def __call__(self, images: Tensor, generator: torch.Generator | None = None) -> Corrupted:
        """Corrupt a batch [B,3,H,W]: float in [0,1], or uint8 (converted here).

        Args:
            images: The clean batch.
            generator: The source of the corruption's randomness: the same seed gives the same corruption.

        Returns:
            The corrupted sample.

        Raises:
            ParameterError: `images` is not a `(B, 3, H, W)` batch, neither float nor uint8, or float outside
                [0, 1] (0-255 pixels, normalised images).

        Shape:
            - images: `(B, 3, H, W)` float in [0, 1], or uint8 in [0, 255].
            - Returns: `state` and `target` `(B, 3, H, W)` float for pixel tasks.
        """
        if not isinstance(images, Tensor):
            raise ParameterError(
                f"{self.name}: images must be a torch.Tensor [B, 3, H, W], got a {type(images).__name__} "
                "(a numpy array: torch.from_numpy(array).permute(0, 3, 1, 2) for [B, H, W, 3])."
            )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ParameterError(
                f"{self.name}: generator must be a torch.Generator, got {generator!r}: for a seed, "
                "torch.Generator().manual_seed(seed)."
            )
        if images.ndim != 4 or images.shape[1] != 3:
            raise ParameterError(
                f"{self.name}: images must be a batch [B, 3, H, W], got shape {tuple(images.shape)}"
                f"{batch_shape_hint(images.shape)}."
            )
        if images.dtype == torch.uint8:
            images = images.float() / 255
        elif not images.is_floating_point():
            raise ParameterError(f"{self.name}: images must be float in [0, 1] or uint8, got {images.dtype}.")
        elif images.numel():
            # 0-255 pixels or normalised images would be corrupted and restored on the wrong scale, silently;
            # the training step already waits on its loss each step, so this one read costs no overlap
            low, high = (v.item() for v in torch.aminmax(images.detach()))
            if not -RANGE_SLACK <= low <= high <= 1 + RANGE_SLACK:  # NaN fails it too
                raise ParameterError(
                    f"{self.name}: images must be float in [0, 1], got values in [{low:.3g}, {high:.3g}]: divide "
                    "0-255 pixels by 255, and give images before their normalisation (the model normalises them)."
                )
        sample = self.corrupt(images, generator)
        if not isinstance(sample, Corrupted) or not sample.state.is_floating_point():  # a plugin's slip, said here
            got = type(sample).__name__ if not isinstance(sample, Corrupted) else f"a {sample.state.dtype} state"
            raise ParameterError(
                f"{self.name}: apply must return a Corrupted(state, target) with a float state (restoration "
                f"takes its gradient), got {got}."
            )
        return sample

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
        """The task's arguments as declared: a scaled parameter left to follow the images is "auto" (its value
        at the last size seen is the attribute), so a task compares equal before and after `fit`."""
        return {k: AUTO if k in self.auto else getattr(self, k) for k in self.params}

    def __repr__(self) -> str:
        args = ", ".join(
            f"{k}={v!r}"
            + (
                f" ({getattr(self, k)} at {self.fitted[0]}x{self.fitted[1]} px)"
                if k in self.auto and self.fitted
                else ""
            )
            for k, v in self.values().items()
        )
        return f"{type(self).__name__}({args})"

    @classmethod
    def summary(cls) -> str:
        """The task's line in `pretexts list`: its docstring's first paragraph, on one line."""
        return first_paragraph(cls.__doc__)


def splits_draw_and_apply(task: Pretext) -> bool:
    """Whether `draw` and `apply` make the task's sample: False for a task (a plugin, say) whose own `corrupt`
    overrides the split (a class that defines both counts as overriding)."""
    mro = type(task).__mro__
    owner = {name: next(i for i, cls in enumerate(mro) if name in vars(cls)) for name in ("apply", "corrupt")}
    return owner["apply"] < owner["corrupt"]


def rand(shape, generator: torch.Generator | None, device, dtype=torch.float32) -> Tensor:
    """U(0,1) on `device` from `generator`, which must live on the same device."""
    return torch.rand(shape, generator=generator, device=device, dtype=dtype)


def uniform(shape, low: float, high: float, generator, device) -> Tensor:
    """U(low, high) of `shape` on `device` from `generator`, in float32 (`rand` scaled)."""
    return low + (high - low) * rand(shape, generator, device)


def batch_shape_hint(shape) -> str:
    """How to make a common wrong shape a [B, 3, H, W] batch ('' for any other)."""
    if len(shape) == 4 and shape[1] == 1:
        return " (grayscale: images.expand(-1, 3, -1, -1) repeats its channel as RGB)"
    if len(shape) == 4 and shape[-1] == 3:
        return " (channels last [B, H, W, 3]: images.permute(0, 3, 1, 2))"
    if len(shape) == 3 and shape[0] in (1, 3):
        return (
            " (one image: images.unsqueeze(0); where `batches` is asked for, an iterable of batches such as [images])"
        )
    return ""
