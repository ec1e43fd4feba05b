"""How a task's state enters a model: one adapter per `Pretext.state_kind`, picked by the task's declaration.

Tasks (pretexts/tasks/) are pure corruptions and know no model; what a state means to a model is the model
side's concern, held here for the methods that restore or reconstruct states (energy, ae). `prepare()` checks
the task against the model (a clear ParameterError when it cannot use it) and gives the task what its
corruption reads from the model as plain numbers; `energy(sample, state)` is the energies [B] of a state.
Building an adapter is cheap and checks nothing, so restoration asks for one where it needs the energy.
A plugin task with a state of its own kind registers its adapter with `@register_state_kind("kind")`."""

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


@register_state_kind("pixels")
class PixelStates(StateAdapter):
    """The state is the image [B,3,H,W]: the model's energy reads it as it is."""

    def prepare(self) -> Pretext:
        """Give the task (and each part of a mixture) that declares a `norm_mean` the model's normalisation mean,
        which the masks' `mean` fill keeps away from."""
        mean = getattr(self.model, "mean", None)
        if isinstance(mean, Tensor) and mean.numel() == 3:
            values = tuple(float(v) for v in mean.flatten())
            for task in (self.task, *self.task.subtasks):
                if hasattr(task, "norm_mean"):
                    task.norm_mean = values
        return self.task

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
