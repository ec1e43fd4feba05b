"""Convolution with a double backward on first-order kernels, swapped into a model by module replacement together
with the analytic BatchNorm of second_order_norm.py.

Autograd differentiates a convolution's backward with `_convolution_double_backward`, which runs convolutions
in shapes the fast kernels do not serve (pytorch/pytorch#22577, #54840) and, for grouped (depthwise) ones, slow
paths (#18631; docs/results/gpu-h100.md has the cost). `SecondOrderConv2d` computes the same forward, and its
backward writes the input's gradient as a transposed convolution: the energy method's double backward then
differentiates that, which needs only a convolution's forward and first-order backward, the kernels a supervised
step runs. Gradients are exact (tests/test_second_order.py checks them against autograd's in float64); only the
order of the floating-point sums changes.
"""

import torch
import torch.nn.functional as F
from timm.layers import BatchNormAct2d
from torch import nn

from pretexts.engine.modules.second_order_norm import SecondOrderBatchNorm2d, SecondOrderBatchNormAct2d

# `--double-backward` (the energy method's parameter): "rewritten" swaps the layers in, "autograd" keeps torch's
DOUBLE_BACKWARDS = ("auto", "rewritten", "autograd")
LAYERS = frozenset({"conv", "batchnorm"})  # the kinds of layer a rewrite can swap


def _will_run(ctx, index: int) -> bool:
    """Whether the running backward needs input `index`'s gradient: the restoration's inner `autograd.grad(E, x)`
    asks for the image's alone, so the weight gradient is skipped there, as autograd's own convolution does."""
    node = ctx.next_functions[index][0]
    if node is None:
        return False
    try:
        return torch._C._will_engine_execute_node(node)
    except RuntimeError:  # not inside the engine's backward (e.g. torch.func): compute it
        return True


def input_grad(grad, weight, input_shape, stride, padding, dilation, groups):
    """d(conv2d)/d(input) as conv_transpose2d, whose own derivatives are a conv2d and a weight gradient."""
    extra = []
    for dim in range(2):
        size = (grad.shape[2 + dim] - 1) * stride[dim] - 2 * padding[dim] + dilation[dim] * (weight.shape[2 + dim] - 1)
        extra.append(input_shape[2 + dim] - size - 1)
    return F.conv_transpose2d(grad, weight, None, stride, padding, tuple(extra), groups, dilation)


class _Conv2d(torch.autograd.Function):
    @staticmethod
    def forward(x, weight, bias, stride, padding, dilation, groups):
        return F.conv2d(x, weight, bias, stride, padding, dilation, groups)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias, *conf = inputs
        ctx.save_for_backward(x, weight)
        ctx.conf = tuple(conf)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        x, weight = x.to(grad.dtype), weight.to(grad.dtype)  # autocast ran the forward in grad's dtype
        stride, padding, dilation, groups = ctx.conf
        need = ctx.needs_input_grad
        grad_x = grad_w = grad_b = None
        if need[0] and _will_run(ctx, 0):
            grad_x = input_grad(grad, weight, x.shape, stride, padding, dilation, groups)
        if need[1] and _will_run(ctx, 1):  # autograd's own op: exact if it is differentiated again
            grad_w = torch.ops.aten.convolution_backward(
                grad, x, weight, None, stride, padding, dilation, False, [0, 0], groups, [False, True, False]
            )[1]
        if ctx.has_bias and need[2] and _will_run(ctx, 2):
            grad_b = grad.sum((0, 2, 3))
        return grad_x, grad_w, grad_b, None, None, None, None


class SecondOrderConv2d(nn.Conv2d):
    """An `nn.Conv2d` (same parameters, same state_dict keys) whose double backward runs on first-order kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Conv2d.apply(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class TwiceDifferentiableHardsigmoid(nn.Hardsigmoid):
    """`nn.Hardsigmoid` as relu6(x + 3) / 6: the same values and gradient (zero outside -3 < x < 3, as torch's),
    and a double backward, which torch's hardsigmoid has not (MobileNetV3's and GhostNet's squeeze-excitation)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(x + 3) / 6


def make_twice_differentiable(model: nn.Module) -> None:
    """Swap in, in place, the layers without any double backward for equal ones that have it. Always needed by the
    exact mode (unlike `rewrite_double_backward`, which only makes it cheaper)."""
    for module in model.modules():
        if type(module) is nn.Hardsigmoid:
            module.__class__ = TwiceDifferentiableHardsigmoid


KIND = {SecondOrderConv2d: "conv", SecondOrderBatchNorm2d: "batchnorm", SecondOrderBatchNormAct2d: "batchnorm"}
NORMS = {nn.BatchNorm2d: SecondOrderBatchNorm2d, BatchNormAct2d: SecondOrderBatchNormAct2d}


def replaceable(module: nn.Module) -> type | None:
    """The rewritten class for `module`, or None: a plain 2-D convolution with numeric zero padding (timm's dynamic
    'same' padding subclasses keep theirs), a plain BatchNorm2d or timm's BatchNormAct2d (SyncBatchNorm keeps its
    own)."""
    if type(module) is nn.Conv2d and module.padding_mode == "zeros" and not isinstance(module.padding, str):
        return SecondOrderConv2d
    return NORMS.get(type(module))


def rewrite_double_backward(model: nn.Module, layers: frozenset[str] = LAYERS) -> int:
    """Swap every replaceable layer of `model` whose kind is in `layers` ("conv", "batchnorm") for its rewritten
    class sharing its parameters and buffers, in place; returns how many. The state_dict, and so checkpoints and
    export, are unchanged."""
    count = 0
    for module in model.modules():
        rewritten = replaceable(module)
        if rewritten and KIND[rewritten] in layers:
            module.__class__ = rewritten  # same attributes and parameters; only forward differs
            count += 1
    return count


def restore_double_backward(model: nn.Module) -> int:
    """Undo `rewrite_double_backward`: back to autograd's own double backward."""
    count = 0
    for module in model.modules():
        if type(module) in KIND:
            module.__class__ = type(module).__bases__[0]  # each rewritten class subclasses its original
            count += 1
    return count


def rewritten_layers(choice: str, device: torch.device, compiled: str | None) -> frozenset[str]:
    """The layers `--double-backward choice` rewrites. "auto": under --compile none (its torch.func step traces
    autograd's); otherwise BatchNorm on every device, where the exact step measured faster with it on the CPU, and
    the convolutions on CUDA only, where they measured faster (on the CPU they did not; docs/performance.md)."""
    if choice != "auto":
        return LAYERS if choice == "rewritten" else frozenset()
    if compiled:
        return frozenset()
    return LAYERS if device.type == "cuda" else frozenset({"batchnorm"})
