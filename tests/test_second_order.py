"""The rewritten convolution double backward (engine/modules/second_order.py): the same gradients as autograd's own,
to float64 precision, through the energy method's whole restoration loss, on every convolution shape the backbones
use; swapped in by `--double-backward` without changing a checkpoint."""

import pytest
import torch
from pretext_images import cifar_batch
from tiny_trainers import tiny_trainer
from torch import nn

from pretexts import create_pretext
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.energy.restore import restoration_loss, restore
from pretexts.engine.methods.states import prepare_task
from pretexts.engine.modules.second_order import (
    SecondOrderConv2d,
    _Conv2d,
    restore_double_backward,
    rewrite_double_backward,
)
from pretexts.engine.modules.second_order_norm import SecondOrderBatchNorm2d
from pretexts.engine.training.loop import Pretrainer

# (stride, padding, dilation, groups, in, out, kernel, size): depthwise 7x7 (ConvNeXt), a strided 3x3 whose input
# size needs output_padding, grouped and dilated, a 1x1, a stem-like 4x4 stride 4, asymmetric stride and padding
SHAPES = [
    ((1, 1), (3, 3), (1, 1), 8, 8, 8, 7, 7),  # ConvNeXt's depthwise 7x7
    ((2, 2), (1, 1), (1, 1), 1, 4, 6, 3, 9),
    ((2, 2), (2, 2), (2, 2), 2, 4, 6, 3, 10),
    ((1, 1), (0, 0), (1, 1), 1, 3, 5, 1, 6),
    ((4, 4), (0, 0), (1, 1), 1, 3, 4, 4, 12),
    ((2, 1), (0, 2), (1, 1), 1, 2, 3, 3, 7),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"stride{s[0]}-groups{s[3]}-k{s[6]}-size{s[7]}")
def test_first_and_second_derivatives_match_finite_differences(shape):
    stride, padding, dilation, groups, cin, cout, k, size = shape
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, cin, size, size, dtype=torch.double, generator=generator, requires_grad=True)
    w = torch.randn(cout, cin // groups, k, k, dtype=torch.double, generator=generator, requires_grad=True)
    b = torch.randn(cout, dtype=torch.double, generator=generator, requires_grad=True)

    def conv(x, w, b):
        return _Conv2d.apply(x, w, b, stride, padding, dilation, groups)

    expected = torch.nn.functional.conv2d(x, w, b, stride, padding, dilation, groups)
    torch.testing.assert_close(conv(x, w, b), expected, rtol=0, atol=0)
    # fast mode compares random projections of the Jacobians (seconds, not a minute); a wrong second order fails it
    assert torch.autograd.gradcheck(conv, (x, w, b), fast_mode=True)
    assert torch.autograd.gradgradcheck(conv, (x, w, b), fast_mode=True)


def restoration_grads(model, images, task_name="random-mask"):
    """The parameters' gradients of the energy method's loss (N = 2, exact double backward) on a seeded sample."""
    task = prepare_task(create_pretext(task_name), model)
    sample = task(images, torch.Generator(images.device).manual_seed(0))
    loss = restoration_loss(restore(model, task, sample, steps=2), sample.target, "mse")
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)


def assert_same_gradients(backbone: str, device: str = "cpu", dtype=torch.double):
    torch.manual_seed(0)
    model = create_energy_model(backbone, img_size=32).to(device, dtype).train()
    images = cifar_batch(4).to(device, dtype)
    expected = restoration_grads(model, images)
    assert rewrite_double_backward(model.backbone) > 0
    got = restoration_grads(model, images)
    assert restore_double_backward(model.backbone) > 0
    assert any(e.abs().sum() > 0 for e in expected[:-1])  # the backbone learns through the double backward
    worst = max(((g - e).norm() / e.norm().clamp_min(1e-30)).item() for g, e in zip(got, expected, strict=True))
    assert worst < 1e-6, f"{backbone}: relative gradient difference {worst:.2e}"


@pytest.mark.parametrize("backbone", ["test_convnext", "test_resnet"])
def test_restoration_loss_gradients_equal_autograds_in_float64(backbone):
    """Depthwise 7x7 (ConvNeXt), and strided convolutions with the rewritten BatchNorm (ResNet), through the whole
    loss (timm's test-size models of both: the same layer kinds; the GPU test below takes the real ones)."""
    assert_same_gradients(backbone)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backbone", ["convnext_atto", "resnet18"])
def test_restoration_loss_gradients_equal_autograds_on_cuda(backbone):
    assert_same_gradients(backbone, "cuda")


def test_rewrite_keeps_parameters_and_checkpoint_keys():
    model = create_energy_model("convnext_atto", img_size=32)
    keys, weights = list(model.state_dict()), [p.data_ptr() for p in model.parameters()]
    convs = [m for m in model.modules() if type(m) is nn.Conv2d]
    assert rewrite_double_backward(model) == len(convs) > 0
    assert all(type(m) is SecondOrderConv2d for m in convs)
    assert list(model.state_dict()) == keys and [p.data_ptr() for p in model.parameters()] == weights
    assert restore_double_backward(model) == len(convs)


def trainer(tmp_path, amp="auto", backbone="test_convnext", **method_args) -> Pretrainer:
    return tiny_trainer(tmp_path, backbone=backbone, amp=amp, method_args=method_args)


@pytest.mark.parametrize(
    "backbone, amp, method_args, rewritten",
    [
        ("test_convnext", "auto", {}, set()),
        ("test_convnext", "bf16", {}, set()),
        ("test_convnext", "auto", {"double_backward": "rewritten"}, {nn.Conv2d}),
        ("test_convnext", "bf16", {"double_backward": "rewritten"}, {nn.Conv2d}),
        ("test_resnet", "auto", {}, {nn.BatchNorm2d}),
        ("test_resnet", "auto", {"double_backward": "rewritten"}, {nn.Conv2d, nn.BatchNorm2d}),
        ("test_resnet", "auto", {"double_backward": "autograd"}, set()),
        ("test_convnext", "auto", {"grad_mode": "finite-difference"}, set()),
    ],
)
def test_double_backward_option_chooses_the_layers(tmp_path, backbone, amp, method_args, rewritten):
    """auto on the CPU rewrites BatchNorm alone (the convolutions' rewrite measured no faster there, in fp32 or
    bf16), rewritten asks for both, autograd for neither; finite differences need no double backward. A step
    reaches the backbone either way."""
    run = trainer(tmp_path, amp, backbone, **method_args)
    swapped = {SecondOrderConv2d: nn.Conv2d, SecondOrderBatchNorm2d: nn.BatchNorm2d}
    kinds = {swapped[type(m)] for m in run.model.backbone.modules() if type(m) in swapped}
    assert kinds == rewritten
    before = [p.detach().clone() for p in run.model.backbone.parameters()]
    run.train_step(cifar_batch(4))
    assert sum(p.grad.abs().sum() for p in run.model.backbone.parameters() if p.grad is not None) > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, run.model.backbone.parameters(), strict=True))


def test_unknown_double_backward_names_the_choices(tmp_path):
    with pytest.raises(Exception, match="rewritten"):
        trainer(tmp_path, double_backward="fast")
