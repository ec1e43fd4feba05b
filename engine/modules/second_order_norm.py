"""Training-mode BatchNorm (torch's, and timm's BatchNormAct2d) with an analytic double backward, swapped in by module
replacement like the convolutions of second_order.py.

Autograd differentiates batch norm's backward with a general double backward of some thirty full-size operations.
`SecondOrderBatchNorm2d` keeps the forward and the first backward on torch's own kernels (`native_batch_norm`,
`native_batch_norm_backward`) and gives that backward a derivative of its own: the energy method's double backward
then costs five per-channel reductions and a few fused multiply-adds (the formula is in `_NormBackward.backward`).
Gradients are exact (tests/test_second_order.py checks them, and their own derivatives, in float64).
"""

import torch
from timm.layers import BatchNormAct2d
from torch import nn
from torch.autograd.function import once_differentiable

DIMS = (0, 2, 3)  # a channel's statistics run over the batch and the image


def _channel(t: torch.Tensor) -> torch.Tensor:
    return t.view(1, -1, 1, 1)


class _NormBackward(torch.autograd.Function):
    """(grad_input, grad_weight, grad_bias) of training-mode batch norm from its upstream gradient `g`.

    Per channel, with s = 1/std, xh = (x - mean) s and m() the channel mean, the input gradient is
    gI = s w P(g) where P(a) = a - m(a) - xh m(a xh) is an orthogonal projection. Its derivatives, for upstream
    gradients u (of gI), v (of grad_weight = sum(g xh)) and t (of grad_bias = sum(g)):
        d/dg = s w P(u) + v xh + t
        d/dw = count s k,  k = m(u g) - m(g) m(u) - m(g xh) m(u xh)
        d/dx = -w s^2 [xh k + m(u xh) P(g) + m(g xh) P(u)] + v s P(g)
    the last from d(sum_i a_i xh_i)/dx = s P(a) and ds/dx = -s^2 xh / count.
    """

    @staticmethod
    def forward(g, x, weight, mean, invstd, eps):
        affine = weight is not None
        mask = [True, affine, affine]
        return torch.ops.aten.native_batch_norm_backward(g, x, weight, None, None, mean, invstd, True, eps, mask)

    @staticmethod
    def setup_context(ctx, inputs, output):
        g, x, weight, mean, invstd, _ = inputs
        ctx.save_for_backward(g, x, weight, mean, invstd)

    @staticmethod
    @once_differentiable
    def backward(ctx, u, v, t):
        g, x, weight, mean, invstd = ctx.saved_tensors
        like = (g, x, weight)  # each gradient returns in its input's dtype
        dtype = torch.promote_types(x.dtype, torch.float32)  # sums of products: never in bf16
        g, x, s = g.to(dtype), x.to(dtype), _channel(invstd.to(dtype))
        xh = (x - _channel(mean.to(dtype))).mul_(s)
        mg, mgx = g.mean(DIMS, keepdim=True), (g * xh).mean(DIMS, keepdim=True)
        sw = s if weight is None else s * _channel(weight.to(dtype))
        dg = dx = dw = None
        if u is not None:
            u = u.to(dtype)
            mu, muxh, mug = u.mean(DIMS, keepdim=True), (u * xh).mean(DIMS, keepdim=True), (u * g).mean(DIMS, True)
            k = mug - mg * mu - mgx * muxh
            dg = torch.addcmul(-sw * mu, xh, -sw * muxh).addcmul_(u, sw)  # s w P(u)
            c = -sw * s  # -w s^2, then P(g) and P(u) expanded into one multiply-add per tensor
            dx = torch.addcmul(-c * (muxh * mg + mgx * mu), xh, c * (k - 2 * muxh * mgx))
            dx.addcmul_(g, c * muxh).addcmul_(u, c * mgx)
            if weight is not None:
                dw = (x[:, 0].numel() * s * k).view(-1)
        if v is not None:
            vs = _channel(v.to(dtype))
            dg = vs * xh if dg is None else dg.addcmul_(xh, vs)
            vs = vs * s
            pg = torch.addcmul(-vs * mg, xh, -vs * mgx).addcmul_(g, vs)  # v s P(g)
            dx = pg if dx is None else dx.add_(pg)
        if t is not None:
            dg = _channel(t.to(dtype)).expand_as(g).clone() if dg is None else dg.add_(_channel(t.to(dtype)))
        grads = [None if a is None else a.to(b.dtype) for a, b in zip((dg, dx, dw), like, strict=True)]
        return *grads, None, None, None


class _BatchNorm(torch.autograd.Function):
    """Training-mode batch norm: (output, mean, 1/std), the statistics returned (not differentiable) so that the
    backward can reuse them; a forward and setup_context of their own, as torch.func requires."""

    @staticmethod
    def forward(x, weight, bias, running_mean, running_var, momentum, eps):
        return torch.ops.aten.native_batch_norm(x, weight, bias, running_mean, running_var, True, momentum, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, bias, *_, eps = inputs
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.save_for_backward(x, weight, output[1], output[2])
        ctx.eps, ctx.has_bias = eps, bias is not None

    @staticmethod
    def backward(ctx, g, _mean, _invstd):
        x, weight, mean, invstd = ctx.saved_tensors
        grad_x, grad_w, grad_b = _NormBackward.apply(g, x, weight, mean, invstd, ctx.eps)
        return grad_x, grad_w, grad_b if ctx.has_bias else None, None, None, None, None


def batch_norm(module: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    """`module`'s training-mode batch norm of `x` (or without running statistics) on `_BatchNorm`, counting and
    updating the running statistics as `nn.BatchNorm2d` does."""
    factor = 0.0 if module.momentum is None else module.momentum
    if module.training and module.track_running_stats and module.num_batches_tracked is not None:
        module.num_batches_tracked.add_(1)  # as nn.BatchNorm2d counts; momentum None averages over them
        factor = 1.0 / float(module.num_batches_tracked) if module.momentum is None else module.momentum
    keep = module.training and module.track_running_stats
    running_mean, running_var = (module.running_mean, module.running_var) if keep else (None, None)
    return _BatchNorm.apply(x, module.weight, module.bias, running_mean, running_var, factor, module.eps)[0]


class SecondOrderBatchNorm2d(nn.BatchNorm2d):
    """An `nn.BatchNorm2d` (same parameters, buffers and state_dict keys) whose double backward is analytic while
    it normalises by batch statistics; with running statistics (eval) it is torch's own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training and self.track_running_stats:
            return super().forward(x)
        self._check_input_dim(x)
        return batch_norm(self, x)


class SecondOrderBatchNormAct2d(BatchNormAct2d):
    """timm's `BatchNormAct2d` (EfficientNet, RegNet, ByobNet, CoAtNet, MaxViT: batch norm, then its `drop` and
    `act`) with `SecondOrderBatchNorm2d`'s batch norm; with running statistics (eval) it is timm's own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training and self.track_running_stats:
            return super().forward(x)
        self._check_input_dim(x)
        return self.act(self.drop(batch_norm(self, x)))
