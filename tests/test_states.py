"""How a task's state enters a model is the model side's (engine/methods/states.py): one adapter per state kind,
picked by the task's `state_kind`; the tasks themselves import no backbone or engine code."""

import subprocess
import sys

import pytest
import torch
from pretext_images import cifar_batch, tiny_vit

from pretexts import Corrupted, DuplicateNameError, ParameterError, Pretext, create_pretext
from pretexts.backbones.vit_tokens import sincos_pos_embed
from pretexts.engine.methods.energy.restore import restoration_loss, restore
from pretexts.engine.methods.states import STATE_KINDS, StateAdapter, register_state_kind, state_adapter


def test_loading_every_task_imports_neither_backbones_nor_engine():
    code = (
        "import sys, pretexts; names = pretexts.list_pretexts(); "
        "[pretexts.create_pretext(n) for n in names]; "
        "print(sorted(m for m in sys.modules if m.startswith(('pretexts.backbones', 'pretexts.engine'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_mixtures_masks_get_the_models_normalisation_mean():
    model = tiny_vit()
    model_mean = tuple(float(v) for v in model.mean.flatten())
    mixed = create_pretext("mixed", tasks="random-mask,gridded-mask,colorization")
    state_adapter(mixed, model).prepare()
    assert [getattr(t, "norm_mean", None) for t in mixed.subtasks] == [model_mean, model_mean, None]


def test_patch_sorting_takes_plain_numbers_from_the_positions_adapter():
    """The ViT's geometry is all the task needs: given by hand, the corruption is the adapter's."""
    images = cifar_batch(2)
    by_hand = create_pretext("patch-sorting").set_grid((8, 8), (4, 4), sincos_pos_embed(4, 192))
    adapted = state_adapter(create_pretext("patch-sorting"), tiny_vit()).prepare()
    first, second = (task(images, torch.Generator().manual_seed(0)) for task in (by_hand, adapted))
    assert torch.equal(first.state, second.state) and torch.equal(first.context, second.context)


def test_an_unknown_state_kind_names_the_kinds_and_how_to_add_one():
    class Angle(Pretext):
        name, state_kind = "angle-task", "angle"

    with pytest.raises(ParameterError, match=r"'angle' states.*pixels, positions.*register_state_kind"):
        state_adapter(Angle(), tiny_vit())


class Brightness(Pretext):
    """A plugin task whose state is no image: one brightness offset per image, restored to 0."""

    name, state_kind = "brightness-offset", "offset"

    def draw(self, images, generator=None):
        return {"offset": torch.rand(images.shape[0], generator=generator) - 0.5}

    def apply(self, images, params):
        return Corrupted(state=params["offset"], target=torch.zeros_like(params["offset"]), context=images)


@pytest.fixture
def offset_kind():
    @register_state_kind("offset")
    class OffsetStates(StateAdapter):
        """The offset enters the energy as a brightness shift of the context image."""

        def energy(self, sample, state):
            return self.model.energy((sample.context + state.view(-1, 1, 1, 1)).clamp(0, 1))

    try:
        yield OffsetStates
    finally:
        STATE_KINDS.pop("offset")


def test_a_plugin_state_kind_trains_through_its_registered_adapter(offset_kind):
    model = tiny_vit().train()
    model.zero_grad()
    task = state_adapter(Brightness(), model).prepare()
    sample = task(cifar_batch(4), torch.Generator().manual_seed(0))
    states = restore(model, task, sample, steps=2)
    assert states[-1].shape == (4,) and not torch.equal(states[-1], sample.state)  # the offsets moved
    restoration_loss(states, sample.target).backward()
    assert model.backbone.patch_embed.proj.weight.grad.abs().sum() > 0
    with pytest.raises(DuplicateNameError, match="two adapters"):
        register_state_kind("offset")(type("Other", (StateAdapter,), {}))
