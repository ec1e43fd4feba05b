"""Convolution with a double backward on first-order kernels, swapped into a model by module replacement.

Autograd differentiates a convolution's backward with `_convolution_double_backward`, which runs convolutions
in shapes the fast kernels do not serve (pytorch/pytorch#22577, #54840) and, for grouped (depthwise) ones, slow
paths (#18631): an exact energy step on ConvNeXt-T took 34x a supervised step on an H100. `SecondOrderConv2d`
computes the same forward, and its backward writes the input's gradient as a transposed convolution: the energy
method's double backward then differentiates that, which needs only a convolution's forward and first-order
backward, the kernels a supervised step runs. Gradients are exact (tests/test_second_order.py checks them against
autograd's in float64); only the order of the floating-point sums changes.
"""

import torch
import torch.nn.functional as F
from torch import nn

# `--double-backward` (the energy method's parameter): "rewritten" swaps the layers in, "autograd" keeps torch's
DOUBLE_BACKWARDS = ("auto", "rewritten", "autograd")


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


def replaceable(module: nn.Module) -> bool:
    """A plain 2-D convolution with numeric zero padding (timm's dynamic 'same' padding subclasses keep theirs)."""
    return type(module) is nn.Conv2d and module.padding_mode == "zeros" and not isinstance(module.padding, str)


def rewrite_convolutions(model: nn.Module) -> int:
    """Swap every replaceable `nn.Conv2d` of `model` for a `SecondOrderConv2d` sharing its parameters, in place;
    returns how many. The state_dict, and so checkpoints and export, are unchanged."""
    count = 0
    for module in model.modules():
        if replaceable(module):
            module.__class__ = SecondOrderConv2d  # same attributes and parameters; only forward differs
            count += 1
    return count


def restore_convolutions(model: nn.Module) -> int:
    """Undo `rewrite_convolutions`: back to autograd's own double backward."""
    count = 0
    for module in model.modules():
        if type(module) is SecondOrderConv2d:
            module.__class__ = nn.Conv2d
            count += 1
    return count


def rewritten_double_backward(choice: str, device: torch.device, compiled: str | None) -> bool:
    """Whether `--double-backward choice` swaps the rewritten convolutions in. "auto": on CUDA, where it measured
    faster, not under --compile, whose torch.func step traces autograd's; not on the CPU, where it measured no
    faster (docs/performance.md)."""
    if choice != "auto":
        return choice == "rewritten"
    return not compiled and device.type == "cuda"
