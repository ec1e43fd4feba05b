"""How a task's state enters a model: one adapter per `Pretext.state_kind`, picked by the task's declaration.

Tasks (pretexts/tasks/) are pure corruptions and know no model; what a state means to a model is the model
side's concern, held here for the methods that restore or reconstruct states (energy, ae). `prepare()` checks
the task against the model (a clear ParameterError when it cannot use it) and gives the task what its
corruption reads from the model as plain numbers (`prepare_task`, the public name, and what `pretexts train` does
before corrupting); `unprepared()` says when the task still corrupts for another model (restore refuses such a
sample); `energy(sample, state)` is the energies [B] of a state. Building an adapter is cheap and checks nothing,
so restoration asks for one where it needs the energy.
A plugin task with a state of its own kind registers its adapter with `@register_state_kind("kind")`."""

import math
from weakref import WeakKeyDictionary

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from pretexts.backbones.vit_tokens import prefix_tokens, sincos_pos_embed, vit_geometry
from pretexts.base import Corrupted, Pretext
from pretexts.errors import DuplicateNameError, ParameterError

STATE_KINDS: dict[str, type["StateAdapter"]] = {}


def register_state_kind(kind: str):
    """Class decorator: the adapter of tasks whose `state_kind` is `kind`; a second one is an error."""

    def wrap(cls):
        old = STATE_KINDS.get(kind)
        if old is not None and old is not cls:
            raise DuplicateNameError(
                f"state kind '{kind}' has two adapters: {old.__qualname__} and {cls.__qualname__}."
            )
        STATE_KINDS[kind] = cls
        return cls

    return wrap


class StateAdapter:
    """A task's states for one model: `prepare` once before corrupting, then `energy` per state."""

    def __init__(self, task: Pretext, model):
        self.task, self.model = task, model

    def prepare(self) -> Pretext:
        """Check the task against the model and give it what it reads from the model; returns the task."""
        return self.task

    def unprepared(self) -> str | None:
        """Why the task, as it stands, corrupts for another model than this one (a clause for restore's error), or
        None where its corruption is this model's. By default None: the task reads nothing from the model."""
        return None

    def energy(self, sample: Corrupted, state: Tensor) -> Tensor:
        """Energies [B] of `state`, a state of `sample`'s kind."""
        raise NotImplementedError


def state_adapter(task: Pretext, model) -> StateAdapter:
    """The adapter of `task.state_kind` for `model`, or a ParameterError naming the kinds there are."""
    adapter = STATE_KINDS.get(task.state_kind)
    if adapter is None:
        raise ParameterError(
            f"task '{task.name}' restores '{task.state_kind}' states, which no model here takes; "
            f"state kinds: {', '.join(STATE_KINDS)}. A plugin registers its own with "
            f"`pretexts.engine.methods.states.register_state_kind`."
        )
    return adapter(task, model)


def prepare_task(task: Pretext, model) -> Pretext:
    """Give `task` what its corruption reads from `model`, as `pretexts train` does before its first batch; returns
    the task (the same object, changed in place). Call it once before `task(images)`: cheap, and again is harmless.

    What a task reads from the model: a mask's gray fill keeps off the model's normalisation mean (a box of
    exactly the mean normalises to zeros, and a LayerNorm CNN's loss then explodes); patch sorting takes the ViT's
    patch grid and sin-cos table. `restore` refuses a sample that a task corrupted for another model, and
    `restoration_error` and `figure_columns`, which corrupt by themselves, prepare the task first.

    Args:
        task (Pretext): The task (`create_pretext`).
        model (EnergyModel): The model that restores its samples (`create_energy_model`; the autoencoder's too).

    Returns:
        The task, prepared for the model.

    Raises:
        ParameterError: The model cannot take the task's state (patch sorting on a backbone without a ViT's
            position embeddings), or no model side takes the task's `state_kind`.

    Examples:
        >>> import torch
        >>> from pretexts import create_pretext
        >>> from pretexts.engine import create_energy_model, prepare_task
        >>> model = create_energy_model("vit_tiny", img_size=32, depth=2, patch_size=8)  # normalises with 0.5
        >>> task = prepare_task(create_pretext("gridded-mask"), model)
        >>> sample = task(torch.rand(2, 3, 32, 32), torch.Generator().manual_seed(0))
        >>> sample.state[0, :, sample.info["mask"][0]][:, 0]  # gray, kept 0.02 off the mean
        tensor([0.5200, 0.5200, 0.5200])
        >>> sorting = prepare_task(create_pretext("patch-sorting", edge_max=1), model)  # the ViT's 4 x 4 grid
        >>> sorting(torch.rand(2, 3, 32, 32)).state.shape
        torch.Size([2, 16, 192])
    """
    return state_adapter(task, model).prepare()


# a model's normalisation mean as plain numbers, kept per model by `prepare`: reading a CUDA buffer at every
# restoration step would wait on the device
MEAN_VALUES: WeakKeyDictionary = WeakKeyDictionary()


def mean_values(model, fresh: bool = False) -> tuple | None:
    """`model.mean` (1, 3, 1, 1) as three floats (as last read unless `fresh`), None where it has no such buffer."""
    mean = getattr(model, "mean", None)
    if not isinstance(mean, Tensor) or mean.numel() != 3:
        return None
    if fresh or model not in MEAN_VALUES:
        MEAN_VALUES[model] = tuple(float(v) for v in mean.flatten())
    return MEAN_VALUES[model]


# the fills that never read the normalisation mean (pretexts/tasks/masking.py): they corrupt alike for every model
FILLS_OFF_MEAN = ("black",)


@register_state_kind("pixels")
class PixelStates(StateAdapter):
    """The state is the image [B,3,H,W]: the model's energy reads it as it is."""

    def prepare(self) -> Pretext:
        """Give the task (and each part of a mixture) that declares a `norm_mean` the model's normalisation mean,
        which the masks' gray fill keeps away from."""
        values = mean_values(self.model, fresh=True)
        if values is not None:
            for task in (self.task, *self.task.subtasks):
                if hasattr(task, "norm_mean"):
                    task.norm_mean = values
        return self.task

    def unprepared(self) -> str | None:
        """A task (or part of a mixture) whose gray fill kept off another normalisation mean."""
        values = mean_values(self.model)
        if values is None:
            return None
        for task in (self.task, *self.task.subtasks):
            own = getattr(task, "norm_mean", None)
            if own is None or getattr(task, "fill", None) in FILLS_OFF_MEAN:
                continue
            if not all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(own, values, strict=True)):
                fill = getattr(task, "fill", None)
                return (
                    f"its {f'{fill} fill' if fill else 'corruption'} kept off normalisation mean {rounded(own)}, the "
                    f"model's is {rounded(values)}"
                )
        return None

    def energy(self, sample: Corrupted, state: Tensor) -> Tensor:
        return self.model.energy(state)


@register_state_kind("positions")
class PositionStates(StateAdapter):
    """The state is per-image position embeddings [B, L, D] of a timm ViT's L patches (patch sorting): patch i
    of the image in `sample.context` enters the blocks with the embedding state[:, i] (paper, eq. 6), and, in
    training mode, only the tokens in `sample.info["keep"]` (patch dropout), when the task drew them."""

    def prepare(self) -> Pretext:
        """Refuse a backbone without absolute position embeddings; give the task the ViT's patch size, grid and
        fixed 2D sin-cos table (`set_grid`)."""
        model = self.model
        name = getattr(model, "backbone_name", type(model.backbone).__name__)
        geometry = vit_geometry(model.backbone, name, self.task.name)
        return self.task.set_grid(
            geometry["patch"], geometry["grid"], sincos_pos_embed(geometry["grid"], geometry["dim"])
        )

    def unprepared(self) -> str | None:
        """A task without the ViT's patch grid, or with another ViT's; a ParameterError for a model without one."""
        model = self.model
        geometry = vit_geometry(model.backbone, getattr(model, "backbone_name", type(model.backbone).__name__))
        grid, patch = getattr(self.task, "grid", None), getattr(self.task, "patch", None)
        if grid is None:
            return "it has no patch grid"
        if (tuple(grid), tuple(patch)) != (geometry["grid"], geometry["patch"]):
            return (
                f"its patch grid is {grid} of {patch}-pixel patches, the model's ViT's is {geometry['grid']} of "
                f"{geometry['patch']}"
            )
        return None

    def energy(self, sample: Corrupted, state: Tensor) -> Tensor:
        """The model's own `patch_drop` is skipped; `pos_drop`, `norm_pre`, the blocks, `norm` and the pooled head
        run as in timm's forward. A dropped token's embedding gets no gradient. Attention runs on the MATH SDPA
        backend (double backward)."""
        model, vit = self.model, self.model.backbone
        keep = sample.info.get("keep") if model.training else None
        with sdpa_kernel(SDPBackend.MATH):
            x = vit.patch_embed(model.normalize(sample.context))
            if x.ndim == 4:  # dynamic_img_size models keep the grid: NHWC
                x = x.flatten(1, 2)
            x = x + state.to(x.dtype)
            if keep is not None:
                x = x.gather(1, keep.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
            prefix = prefix_tokens(vit, x.shape[0])
            if prefix is not None:
                x = torch.cat([prefix.to(x.dtype), x], dim=1)
            x = vit.norm_pre(vit.pos_drop(x))
            x = vit.norm(vit.blocks(x))
            return model.score(vit.forward_head(x, pre_logits=True))


def rounded(values) -> str:
    """(0.485, 0.456, 0.406): a mean's three channels, short."""
    return "(" + ", ".join(f"{v:.3g}" for v in values) + ")"
