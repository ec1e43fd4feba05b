"""FLOPs of one step, its fraction of the FLOP bound, and an op-level CPU profile of a step (benchmarks/throughput.py).

FLOPs are `torch.utils.flop_counter.FlopCounterMode`'s count over one whole step (forward, backward, the double
backward where the step has one; the optimiser's elementwise updates count nothing). The fraction of the bound of a
row is (its time / supervised time) / (its FLOPs / supervised FLOPs): how many times its FLOP-proportional time it
takes, 1.00 for the supervised row by definition.

flop_counter (torch 2.14) ignores `groups` in the weight gradient of `convolution_backward`: for a depthwise
convolution it counts C times the true work (C + 1 forwards' worth for the backward instead of 2; `depthwise_check`
prints it). The counts here use `grouped_conv_backward_flop`, the same formula with the weight term divided by groups.

The profile splits a step's self CPU time into forward, first backward (the restoration gradient dE/dx,
`torch.autograd.grad(create_graph=True)`), second backward (the loss's `backward()`, through dE/dx) and the
optimiser, by wrapping `torch.autograd.grad` and `torch.autograd.backward` in `record_function` ranges while the step
runs (the step itself is the project's, unchanged). On the CPU the autograd engine runs a CPU graph on the calling
thread, so every op nests under its range.
"""

import contextlib
from collections import defaultdict

import torch
from torch import nn
from torch.autograd import profiler as autograd_profiler
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count, get_shape

FWD, BWD1, BWD2, OPT = "forward", "1st backward (dE/dx)", "2nd backward (loss)", "optimizer"
PHASES = (FWD, BWD1, BWD2, OPT)


def grouped_conv_backward_flop(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    groups,
    output_mask,
    out_shape,
    **kwargs,
) -> int:
    """flop_counter's `conv_backward_flop` with the weight gradient's term divided by `groups` (exact for them)."""

    def t(shape):
        return [shape[1], shape[0]] + list(shape[2:])

    flops = 0
    if output_mask[0]:
        flops += conv_flop_count(grad_out_shape, w_shape, get_shape(out_shape[0]), not transposed)
    if output_mask[1]:
        weight = t(get_shape(out_shape[1]))
        pair = (t(grad_out_shape), t(x_shape)) if transposed else (t(x_shape), t(grad_out_shape))
        flops += conv_flop_count(*pair, weight, transposed=False) // groups
    return flops


def counter(raw: bool = False) -> FlopCounterMode:
    """A FlopCounterMode with `grouped_conv_backward_flop` (or flop_counter's own formulas if `raw`)."""
    mapping = {} if raw else {torch.ops.aten.convolution_backward: grouped_conv_backward_flop}
    return FlopCounterMode(display=False, custom_mapping=mapping)


@contextlib.contextmanager
def phase_ranges(on_enter=None, on_exit=None):
    """While active, `torch.autograd.grad` runs in a BWD1 range and `torch.autograd.backward` in a BWD2 one;
    `on_enter(phase)` / `on_exit(phase)` are called around each (e.g. to read a FLOP counter)."""
    grad, backward = torch.autograd.grad, torch.autograd.backward

    def wrap(fn, phase):
        def wrapped(*args, **kwargs):
            with autograd_profiler.record_function(phase):
                on_enter and on_enter(phase)
                try:
                    return fn(*args, **kwargs)
                finally:
                    on_exit and on_exit(phase)

        return wrapped

    torch.autograd.grad, torch.autograd.backward = wrap(grad, BWD1), wrap(backward, BWD2)
    try:
        yield
    finally:
        torch.autograd.grad, torch.autograd.backward = grad, backward


def step_flops(step, images) -> tuple[int, dict]:
    """FLOPs of one call of `step(images)`, in all and per phase (forward is the rest)."""
    count = counter()
    per_phase, start = defaultdict(int), {}

    def enter(phase):
        start[phase] = count.get_total_flops()

    def leave(phase):
        per_phase[phase] += count.get_total_flops() - start[phase]

    with phase_ranges(enter, leave), count:
        step(images)
    total = count.get_total_flops()
    per_phase[FWD] = total - per_phase[BWD1] - per_phase[BWD2]
    return total, dict(per_phase)


def depthwise_check(model: nn.Module, images) -> str | None:
    """flop_counter's count of the first depthwise Conv2d of `model` (forward, and its backward to input and weight)
    against the analytic 2*C*H*W*k*k*B (forward; the backward is twice that); None without depthwise convolutions."""
    conv = next(
        (m for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups > 1 and m.groups == m.in_channels),
        None,
    )
    if conv is None:
        return None
    seen = {}
    handle = conv.register_forward_hook(lambda mod, inp, out: seen.setdefault("x", inp[0].detach()))
    with torch.no_grad():
        model(images)
    handle.remove()
    x = seen["x"].clone().requires_grad_(True)
    with counter(raw=True) as fwd_counter:
        out = conv(x)
    counts = []
    for raw in (True, False):
        x.grad = conv.weight.grad = None
        with counter(raw) as bwd_counter:
            conv(x).sum().backward()
        counts.append(bwd_counter.get_total_flops() - fwd_counter.get_total_flops())
    batch, channels, height, width = out.shape
    analytic = 2 * channels * height * width * conv.kernel_size[0] * conv.kernel_size[1] * batch
    fwd = fwd_counter.get_total_flops()
    return (
        f"depthwise Conv2d check ({channels} ch, {conv.kernel_size[0]}x{conv.kernel_size[1]}, out {height}x{width}, "
        f"batch {batch}): flop_counter forward {fwd:,} = analytic 2*C*H*W*k*k*B {analytic:,} x {fwd / analytic:.2f}; "
        f"its backward {counts[0]:,} = analytic (2x forward) x {counts[0] / (2 * analytic):.1f}; "
        f"corrected (weight term / groups, used above) x {counts[1] / (2 * analytic):.2f}"
    )


def _phase_of(event) -> str:
    while event is not None:
        if event.name in (BWD1, BWD2):
            return event.name
        if event.name.startswith("Optimizer."):
            return OPT
        event = event.cpu_parent
    return FWD


FLOP_KERNELS = ("mm", "convolution", "conv2d", "conv_depthwise", "scaled_dot_product")  # what flop_counter counts


def profile_step(step, images, flops=None, top: int = 8, nodes: int = 8) -> str:
    """A markdown summary of one profiled `step(images)`: the split of its self CPU time by phase (beside the FLOPs'
    split, `flops` as `step_flops` returns them), the top operators by self CPU time with their split by phase, the
    share of time in the kernels that carry the FLOPs (matmul, convolution, attention), and the autograd nodes of
    the 2nd backward by total time."""
    from torch.profiler import ProfilerActivity, profile

    with phase_ranges(), profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step(images)
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    ops, phases, second_nodes = defaultdict(lambda: defaultdict(float)), defaultdict(float), defaultdict(float)
    for event in events:
        phase = _phase_of(event)
        if event.name in (BWD1, BWD2):
            continue
        ops[event.name][phase] += event.self_cpu_time_total
        phases[phase] += event.self_cpu_time_total
        if phase == BWD2 and event.name.startswith("autograd::engine::evaluate_function: "):
            second_nodes[event.name.split(": ", 1)[1]] += event.cpu_time_total
    total = sum(phases.values())
    shown = [p for p in PHASES if phases[p]]
    lines = [
        "| | " + " | ".join(shown) + " |",
        "|---|" + "---|" * len(shown),
        f"| self CPU time ({total / 1e3:.0f} ms) | " + " | ".join(f"{100 * phases[p] / total:.1f} %" for p in shown),
    ]
    if flops:
        count, split = flops
        lines.append(
            f"| FLOPs ({count / 1e9:.1f} G) | " + " | ".join(f"{100 * split.get(p, 0) / count:.1f} %" for p in shown)
        )
        lines.append("| GFLOP/s | " + " | ".join(f"{split.get(p, 0) / phases[p] / 1e3:.1f}" for p in shown))
    lines[2:] = [line + " |" for line in lines[2:]]
    kernels = [e for e in events if e.name.startswith("aten::") and any(k in e.name for k in FLOP_KERNELS)]
    in_kernels = sum(e.self_cpu_time_total for e in kernels)
    depthwise = sum(  # a (C, 1, k, k) weight among the inputs: a depthwise convolution or its gradient
        e.self_cpu_time_total
        for e in kernels
        if "conv" in e.name and any(len(s) == 4 and s[1] == 1 and s[2] * s[3] > 1 for s in e.input_shapes or [])
    )
    lines.append(
        "\nself time in the kernels that carry the FLOPs (matmul, convolution, attention): "
        f"{100 * in_kernels / total:.1f} %"
        + (f", {flops[0] / in_kernels / 1e3:.1f} GFLOP/s there" if flops else "")
        + (
            f"; convolution kernels with a depthwise (C, 1, k, k) weight: {100 * depthwise / total:.1f} %"
            * bool(depthwise)
        )
    )
    lines += ["", f"| top {top} operators by self CPU time | share | " + " | ".join(shown) + " |"]
    lines.append("|---|---|" + "---|" * len(shown))
    ranked = sorted(ops.items(), key=lambda kv: -sum(kv[1].values()))
    for name, split in ranked[:top]:
        self_time = sum(split.values())
        cells = " | ".join(f"{100 * split[p] / self_time:.0f} %" if split[p] else "" for p in shown)
        lines.append(f"| {name} | {100 * self_time / total:.1f} % | {cells} |")
    if second_nodes:
        lines += ["", f"| top {nodes} autograd nodes of the {BWD2} (total time, children included) | share of it |"]
        lines.append("|---|---|")
        for name, t in sorted(second_nodes.items(), key=lambda kv: -kv[1])[:nodes]:
            lines.append(f"| {name} | {100 * t / phases[BWD2]:.1f} % |")
    return "\n".join(lines)
