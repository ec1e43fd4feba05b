"""--compile: the energy method's restoration step through torch.func + torch.compile gives eager's gradients and
weights in both gradient modes; other methods compile the backbone; a backbone that does not compile runs eagerly."""

import pytest
import torch
from torch._dynamo import register_backend

from pretexts.engine import EnergyMethod, PretrainConfig, Pretrainer
from pretexts.engine.methods.energy.model import create_energy_model

# AOTAutograd without inductor's code generation: the same traced double backward, seconds instead of minutes
BACKEND = "aot_eager"


@register_backend
def refusing_backend(gm, example_inputs):
    raise RuntimeError("this backend compiles nothing")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Dynamo caches compiled code per code object: without a reset a later test would reuse an earlier backend."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def tiny_vit():
    torch.manual_seed(0)
    return create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2)


class TinyVit(EnergyMethod):
    def build_model(self):
        return tiny_vit()


def trainer(tmp_path, compile_, method_class=None, **settings) -> Pretrainer:
    """A batch-8 run at lr 1e-3 from its first step, in a folder of its own per backend; `method_class` overrides the
    registered method that `settings` may name."""
    defaults = dict(backbone="vit_tiny", batch_size=8, workers=0, lr=1e-3, warmup_epochs=0)
    cfg = PretrainConfig(**{**defaults, **settings}, compile=compile_, out=str(tmp_path / str(compile_)))
    return Pretrainer(cfg, method=method_class)


def trained(run: Pretrainer, images: torch.Tensor) -> Pretrainer:
    run.train_step(images)
    return run


def gradients(run: Pretrainer) -> torch.Tensor:
    """Every parameter's gradient of the run's last step, flattened (zeros where a parameter got none)."""
    return torch.cat([torch.zeros(p.numel()) if p.grad is None else p.grad.flatten() for p in run.model.parameters()])


@pytest.mark.parametrize("mode", ["exact", "finite-difference"])
def test_a_compiled_run_takes_eagers_gradients_and_trains_the_same_weights(mode, tmp_path, real_images):
    def step(compile_):
        return trained(trainer(tmp_path, compile_, TinyVit, method_args={"grad_mode": mode}), real_images[:8])

    eager, compiled = step(None), step(BACKEND)
    assert compiled.method.compiled is not None and not compiled.method.compiled.failed
    # finite differences need no double backward, so fused attention stays allowed
    assert compiled.model.math_attention is (mode == "exact")
    # a first-order-only step would leave the backbone without gradient: far outside this tolerance
    backbone = sum(p.numel() for p in eager.model.backbone.parameters())
    expected = gradients(eager)
    assert expected[:backbone].norm() > 0
    assert (gradients(compiled) - expected).norm() <= 1e-5 * expected.norm()
    assert eager.model.state_dict().keys() == compiled.model.state_dict().keys(), "compiled in place, same keys"
    fresh = tiny_vit().state_dict()
    changed = [k for k, v in compiled.model.state_dict().items() if not torch.equal(fresh[k], v)]
    assert "backbone.blocks.0.attn.qkv.weight" in changed and "head.weight" in changed
    for key, value in eager.model.state_dict().items():
        torch.testing.assert_close(compiled.model.state_dict()[key], value, rtol=1e-5, atol=1e-7)


def test_a_step_that_does_not_compile_says_so_once_and_runs_eagerly(tmp_path, real_images, capsys):
    run = trainer(tmp_path, "refusing_backend", TinyVit)
    before = run.model.head.weight.clone()
    run.train_step(real_images[:8])
    run.train_step(real_images[:8])
    lines = [line for line in capsys.readouterr().err.splitlines() if "--compile" in line]
    assert len(lines) == 1 and "vit_tiny" in lines[0] and "runs eagerly" in lines[0]
    assert not torch.equal(before, run.model.head.weight)


def test_other_methods_compile_the_backbone_and_fall_back_to_eager(tmp_path, real_images, capsys):
    compiled = trained(trainer(tmp_path, BACKEND, backbone="test_convnext", method="ae"), real_images[:8])
    backbone = compiled.model.backbone
    assert "forward_intermediates" in vars(backbone), "the backbone's feature pass is compiled in place"
    assert "--compile" not in capsys.readouterr().err
    torch._dynamo.reset()
    refused = trainer(tmp_path, "refusing_backend", backbone="test_convnext", method="ae")
    refused.train_step(real_images[:8])
    refused.train_step(real_images[:8])
    lines = [line for line in capsys.readouterr().err.splitlines() if "--compile" in line]
    assert len(lines) == 1 and "test_convnext" in lines[0] and "runs eagerly" in lines[0]


def test_mae_compiles_its_encoder_and_decoder_and_trains_as_eager(tmp_path, real_images):
    """MAE's encoder runs the backbone's blocks on the visible tokens, not its forward_features: compiling the
    backbone's entry points would compile nothing MAE calls."""

    def step(compile_):
        return trained(trainer(tmp_path, compile_, method="mae", backbone="test_vit"), real_images[:8])

    eager, compiled = step(None), step(BACKEND)
    assert {"encode", "decode"} <= set(vars(compiled.model)), "the encoder and decoder are compiled in place"
    for key, value in eager.model.state_dict().items():
        torch.testing.assert_close(compiled.model.state_dict()[key], value, rtol=1e-4, atol=1e-6)
