"""Speed and memory options on BatchNorm backbones. `--grad-checkpointing` must leave a run's running statistics as
they are: torch's recomputation runs a checkpointed BatchNorm's training forward again in each backward (twice more
per forward in the energy method's double backward), so a backbone with BatchNorm keeps its activations, with a
warning. `--compile` cannot trace BatchNorm's running-statistic updates inside torch.func, so the energy method's
restoration step runs eagerly from the start, with one line."""

import warnings

import torch

import pretexts
from pretexts.backbones.factory import set_grad_checkpointing
from pretexts.engine import EnergyMethod, PretrainConfig, restoration_loss, restore
from pretexts.engine.methods.energy.compiled import CompiledRestore
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.states import prepare_task


def norm_buffers(model) -> dict:
    return {k: v.clone() for k, v in model.named_buffers() if "running" in k or "num_batches" in k}


def stats_after_one_step(checkpointing: bool, real_images) -> dict:
    torch.manual_seed(0)
    model = create_energy_model("test_resnet", img_size=32)
    task = prepare_task(pretexts.create_pretext("random-mask"), model)
    config = PretrainConfig(backbone="test_resnet", grad_checkpointing=checkpointing)
    model = EnergyMethod(config, task, torch.device("cpu")).apply_speedups(model).train()
    sample = task(real_images[:4], torch.Generator().manual_seed(0))
    restoration_loss(restore(model, task, sample, steps=2), sample.target).backward()
    return norm_buffers(model)


def test_checkpointing_leaves_batchnorm_statistics_as_without(real_images):
    plain = stats_after_one_step(False, real_images)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checkpointed = stats_after_one_step(True, real_images)
    assert plain and plain.keys() == checkpointed.keys()
    for name, value in plain.items():
        torch.testing.assert_close(checkpointed[name], value, rtol=0, atol=0, msg=name)
    said = [str(w.message) for w in caught if "--grad-checkpointing" in str(w.message)]
    assert len(said) == 1 and "running statistics" in said[0] and "\n" not in said[0], said


def test_checkpointing_stays_on_without_batchnorm():
    torch.manual_seed(0)
    vit = create_energy_model("vit_tiny", img_size=32, depth=2).backbone
    set_grad_checkpointing(vit)
    assert vit.grad_checkpointing


def test_compile_skips_the_restoration_step_of_a_batchnorm_backbone_with_one_line(real_images, capsys):
    torch.manual_seed(0)
    model = create_energy_model("test_resnet", img_size=32).train()
    task = prepare_task(pretexts.create_pretext("random-mask"), model)
    compiled = CompiledRestore(model, "aot_eager", "exact", 1e-2, "test_resnet")
    assert compiled.failed  # decided before any trace: nothing is paid for
    assert compiled(task, task(real_images[:2], torch.Generator().manual_seed(0)), steps=2) is None
    lines = [line for line in capsys.readouterr().err.splitlines() if "--compile" in line]
    assert len(lines) == 1 and "test_resnet" in lines[0] and "BatchNorm" in lines[0] and "eagerly" in lines[0]


def test_the_clis_own_warnings_read_as_one_line_and_others_as_python_shows_them(tmp_path):
    """The checkpointing warning pointed into engine/methods/base.py and printed its source line."""
    import pretexts.engine.methods.base as base
    from pretexts.cli import one_line_warning

    ours = one_line_warning("--grad-checkpointing is off for backbone ResNet", UserWarning, base.__file__, 161)
    assert ours == "warning: --grad-checkpointing is off for backbone ResNet\n"
    theirs = one_line_warning("deprecated", UserWarning, str(tmp_path / "user_code.py"), 7, "x = 1")
    assert theirs.startswith(f"{tmp_path / 'user_code.py'}:7: UserWarning: deprecated")


def test_the_run_records_checkpointing_as_it_ran(tmp_path):
    """config.json said `grad_checkpointing: true` for a BatchNorm backbone that kept its activations."""
    from pretexts.engine import Pretrainer
    from pretexts.engine.training.config_record import saved_settings

    def recorded(backbone: str) -> bool:
        cfg = PretrainConfig(backbone=backbone, grad_checkpointing=True, workers=0, out=str(tmp_path / backbone))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return saved_settings(Pretrainer(cfg).record)["grad_checkpointing"]

    assert recorded("test_resnet") is False
    assert recorded("test_vit") is True
