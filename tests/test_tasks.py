"""Contracts every registered pretext task keeps: shapes, targets, seeding, parameters, one training step."""

import pytest
import torch
from pretext_images import cifar_batch, tiny_vit

from pretexts import ParameterError, create_pretext, get_pretext_class, list_pretexts
from pretexts.engine.methods.energy.restore import restoration_loss, restore
from pretexts.engine.methods.states import state_adapter
from pretexts.tasks.mixed import is_pixel_task

TASKS = list_pretexts()
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def make(name, **kwargs):
    return state_adapter(create_pretext(name, **kwargs), tiny_vit()).prepare()


def corrupt(task, images, seed=0):
    return task(images, torch.Generator(images.device).manual_seed(seed))


def test_the_paper_tasks_are_registered():
    expected = {
        "gridded-mask",
        "random-mask",
        "super-resolution",
        "denoising",
        "colorization",
        "patch-sorting",
        "mixed",
    }
    assert expected <= set(TASKS)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", TASKS)
def test_shape_dtype_device_and_target(name, device):
    images = cifar_batch(4).to(device)
    task = make(name)
    sample = corrupt(task, images)
    assert sample.state.device == images.device
    assert sample.state.shape == sample.target.shape
    if is_pixel_task(task):
        assert sample.state.shape == images.shape and sample.state.dtype == images.dtype
        assert torch.equal(sample.target, images)
    else:  # the context carries the image; the target is what the state must reach
        assert sample.context.shape == images.shape
    assert not torch.allclose(sample.state, sample.target)


@pytest.mark.parametrize("name", [n for n in TASKS if n != "patch-sorting"])
def test_float64_and_uint8_inputs(name):
    images = cifar_batch(2)
    task = make(name)
    assert corrupt(task, images.double()).state.dtype == torch.float64
    as_uint8 = corrupt(task, (images * 255).round().to(torch.uint8))
    assert as_uint8.state.dtype == torch.float32
    assert torch.allclose(as_uint8.target, images, atol=1 / 255)


@pytest.mark.parametrize("name", ["super-resolution", "random-mask", "colorization"])
def test_float_images_off_the_unit_range_are_refused_with_the_scale_they_look_like(name):
    images, task = cifar_batch(2), make(name)
    nan = images.clone()
    nan[0, 0, 0, 0] = float("nan")
    for wrong in (images * 255, (images - 0.45) / 0.25, nan):  # 0-255 pixels; normalised images; a NaN
        with pytest.raises(ParameterError, match=r"images must be float in \[0, 1\], got values in .*divide"):
            task(wrong)
    corrupt(task, (images + 5e-4).clamp(max=1 + 5e-4))  # a rounding step past 1 is still an image


def test_a_numpy_batch_or_an_int_seed_is_refused_with_what_to_pass():
    task, images = make("random-mask"), cifar_batch(2)
    with pytest.raises(ParameterError, match="must be a torch.Tensor .* got a ndarray .*torch.from_numpy"):
        task(images.permute(0, 2, 3, 1).numpy())
    with pytest.raises(ParameterError, match=r"generator must be a torch.Generator, got 0: .*manual_seed\(seed\)"):
        task(images, 0)


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_same_output(name):
    images = cifar_batch(8)
    task = make(name)
    first, again = corrupt(task, images, seed=3), corrupt(task, images, seed=3)
    assert torch.equal(first.state, again.state)
    if name not in ("colorization", "super-resolution"):  # these two draw nothing
        assert not torch.equal(first.state, corrupt(task, images, seed=4).state)


@pytest.mark.parametrize("name", TASKS)
def test_docstring_summary_cites_the_paper(name):
    cls = get_pretext_class(name)
    assert cls.summary() and len(cls.summary()) < 120
    assert "Table" in cls.__doc__ or "Section" in cls.__doc__


@pytest.mark.parametrize("name", TASKS)
def test_out_of_range_parameters_name_the_range(name):
    for key, param in get_pretext_class(name).params.items():
        if param.high is not None:
            bad = param.high + 1
            with pytest.raises(ParameterError, match=rf"{key}.*allowed range is \[{param.low}, {param.high}\]"):
                create_pretext(name, **{key: bad})


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("random-mask", {"low": 0.05, "high": 0.01}),
        ("random-mask", {"aspect_low": 3.0, "aspect_high": 2.0}),
        ("denoising", {"gamma_low": 0.8, "gamma_high": 0.2}),
    ],
)
def test_cross_parameter_checks(name, kwargs):
    with pytest.raises(ParameterError, match="must be <="):
        create_pretext(name, **kwargs)


@pytest.mark.parametrize("name", TASKS)
def test_one_step_reaches_the_first_layer(name):
    model = tiny_vit()
    model.train()
    model.zero_grad()
    sample = corrupt(make(name), cifar_batch(4))
    task = make(name)
    loss = restoration_loss(restore(model, task, sample, steps=2), sample.target)
    loss.backward()
    first = model.backbone.patch_embed.proj.weight.grad
    assert torch.isfinite(loss) and first is not None and first.abs().sum() > 0


def test_one_step_on_a_cnn():
    from pretexts.engine.methods.energy.model import create_energy_model

    torch.manual_seed(0)
    model = create_energy_model("resnet18").train()
    task = state_adapter(create_pretext("gridded-mask", grid=8), model).prepare()
    # At 32 px ResNet's last map is 1x1: train-mode BatchNorm over a batch of 2-4 makes the
    # energy flat (dE/dx = 0), so this test uses 8 images.
    sample = corrupt(task, cifar_batch(8))
    restoration_loss(restore(model, task, sample, steps=2), sample.target).backward()
    assert model.backbone.conv1.weight.grad.abs().sum() > 0
