"""bf16 autocast keeps the energy method's training signal: the restoration loss's gradient with respect to the
backbone, and the restored images, agree with float32's, in both gradient modes, on the CPU and on CUDA.

The loss reaches the backbone only through dE/dx (a second-order term), so this is where reduced precision could
silently break training. Measured on the CPU (seeded, so every run gives the same numbers; 8 CIFAR images,
colorization, N = 2), bf16 against float32:

    backbone         mode               gradient cosine  gradient rel. error  update cosine  update rel. error
    ViT (2 blocks)   exact              0.99998          0.0061               0.99998        0.0066
    ViT (2 blocks)   finite-difference  1.00000          0.0008               0.99998        0.0067
    convnext_atto    exact              0.99999          0.0054               0.99998        0.0057
    convnext_atto    finite-difference  1.00000          0.0013               0.99998        0.0057

The thresholds below sit 4-5x above these and catch the faults tried: a gradient without the second-order term
(cosine 0), the restoration step x - alpha dE/dx taken in bf16 or its result rounded to bf16 (update rel. error
0.08-0.29, cosine 0.96-0.997), and finite differences taken in bf16 (gradient rel. error 0.021-0.024, against
0.0008-0.0013 when they run in float32, outside autocast, as they do). Other model seeds and images: the same
numbers within 0.001.
"""

import pytest
import torch
import torch.nn.functional as F
from cli_runs import one_torch_thread  # noqa: F401 (a fixture: tiny models run faster on one thread)

import pretexts
from pretexts.engine import EnergyMethod, PretrainConfig
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.energy.restore import restore
from pretexts.engine.training import precision
from pretexts.engine.training.precision import autocast

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
    ),
]
BACKBONES = {
    "vit": lambda: create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2, positions="learned"),
    "convnext": lambda: create_energy_model("convnext_atto", img_size=32),
}
COSINE = 0.999
# relative norm of (bf16 - float32) / float32; finite differences run their passes in float32, so theirs is tighter
GRADIENT_ERROR = {"exact": 0.03, "finite-difference": 0.01}
UPDATE_ERROR = 0.03


def energy_method(backbone: str, mode: str, device: torch.device) -> EnergyMethod:
    """The energy method as a run builds it (its speedups included), on a seeded tiny model."""

    class Tiny(EnergyMethod):
        def build_model(self):
            torch.manual_seed(0)
            return BACKBONES[backbone]()

    cfg = PretrainConfig(task="colorization", method_args={"grad_mode": mode}, device=str(device))
    method = Tiny(cfg, pretexts.create_pretext("colorization"), device)
    method.setup()
    return method


def step_under(method: EnergyMethod, images: torch.Tensor, dtype: torch.dtype | None):
    """What a training step under `dtype` autocast computes (as Pretrainer.compute_loss runs the loss): the loss's
    gradient with respect to the backbone (flat, float64), and the restoration's updates x_j - x_0 (flat)."""
    sample = method.task(images, torch.Generator(images.device).manual_seed(0))
    params = list(method.model.backbone.parameters())
    with autocast(images.device, dtype):
        loss = method.loss(sample)
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    gradient = torch.cat([(g if g is not None else torch.zeros_like(p)).flatten() for g, p in zip(grads, params)])
    with autocast(images.device, dtype):  # the states that loss was taken of
        states = restore(method.model, method.task, sample, method.args["steps"], grad_mode=method.args["grad_mode"])
    updates = torch.cat([(state.detach().float() - sample.state).flatten() for state in states])
    return gradient.double(), updates.double()


def agreement(reference: torch.Tensor, other: torch.Tensor) -> tuple[float, float]:
    """(cosine, relative norm of the difference) of `other` against `reference`."""
    return (F.cosine_similarity(reference, other, dim=0).item(), ((other - reference).norm() / reference.norm()).item())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["exact", "finite-difference"])
@pytest.mark.parametrize("backbone", BACKBONES)
def test_bf16_gradient_and_restoration_agree_with_float32(real_images, backbone, mode, device):
    device = torch.device(device)
    method = energy_method(backbone, mode, device)
    images = real_images[:8].to(device)
    gradient, updates = step_under(method, images, None)
    bf16_gradient, bf16_updates = step_under(method, images, torch.bfloat16)
    assert gradient.norm() > 0 and updates.norm() > 0
    cosine, error = agreement(gradient, bf16_gradient)
    assert cosine > COSINE and error < GRADIENT_ERROR[mode], (cosine, error)
    cosine, error = agreement(updates, bf16_updates)
    assert cosine > COSINE and error < UPDATE_ERROR, (cosine, error)


@pytest.mark.parametrize("native", [True, False])
def test_bf16_on_a_cpu_without_native_bf16_warns_and_says_what_to_use(monkeypatch, recwarn, native):
    """Emulated bf16 ran a 512x512 matmul 40x slower than fp32 (an AVX2 CPU): asking for it there is warned."""
    monkeypatch.setattr(precision, "native_cpu_bf16", lambda: native)
    assert precision.amp_dtype("bf16", torch.device("cpu")) == torch.bfloat16  # still what was asked for
    assert precision.amp_dtype("off", torch.device("cpu")) is None
    assert precision.amp_dtype("auto", torch.device("cpu")) is None  # auto never picks bf16 on a CPU
    warned = [str(w.message) for w in recwarn if "bf16" in str(w.message)]
    assert len(warned) == (0 if native else 1)
    if not native:
        assert "emulated" in warned[0] and "use --amp off" in warned[0]
