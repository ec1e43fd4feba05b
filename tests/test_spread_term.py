"""The energy method's optional spread term (`--method-arg spread`): the concentration of the clean images'
features, its gradient reaching the backbone, and training with it spreading real images' features."""

import pytest
import torch

import pretexts
from pretexts.engine import create_energy_model
from pretexts.engine.measures.health import top_component_share
from pretexts.engine.methods.energy.method import EnergyMethod
from pretexts.engine.methods.energy.spread import concentration
from pretexts.engine.training.config import PretrainConfig
from pretexts.errors import ParameterError


def test_concentration_is_one_on_one_direction_and_the_inverse_participation_ratio_otherwise():
    generator = torch.Generator().manual_seed(0)
    line = torch.randn(32, 1, generator=generator) * torch.randn(1, 16, generator=generator)
    assert concentration(line).item() == pytest.approx(1.0, abs=1e-5)
    even = torch.eye(8).repeat(2, 1)  # 16 images, 8 orthogonal directions of equal variance
    assert concentration(even).item() == pytest.approx(1 / 7, rel=1e-4)  # centring takes one direction
    features = torch.randn(64, 24, generator=generator) * torch.linspace(0.1, 3, 24)
    eigenvalues = torch.linalg.eigvalsh(torch.cov(features.T.double()))
    expected = (eigenvalues.square().sum() / eigenvalues.sum().square()).item()
    assert concentration(features).item() == pytest.approx(expected, rel=1e-5)
    assert concentration(features * 7.0 + 3.0).item() == pytest.approx(expected, rel=1e-5)  # scale and shift free


def test_concentration_refuses_fewer_than_two_images():
    with pytest.raises(ValueError, match="B >= 2"):
        concentration(torch.randn(1, 8))


class TwoBlockEnergy(EnergyMethod):
    """The energy method on a two-block vit_tiny with 8-pixel patches: the same code path, a tenth of the time."""

    def build_model(self) -> torch.nn.Module:
        return create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2)


def energy_method(task: str = "random-mask", **method_args) -> EnergyMethod:
    cfg = PretrainConfig(backbone="vit_tiny", img_size=32, task=task, method_args=method_args)
    return TwoBlockEnergy(cfg, pretexts.create_pretext(task), torch.device("cpu"))


def test_the_weight_is_parsed_in_its_range_and_off_by_default():
    assert energy_method().args["spread"] == 0.0
    assert energy_method(spread="1e-4").args["spread"] == pytest.approx(1e-4)
    with pytest.raises(ParameterError, match="spread"):
        energy_method(spread=-1.0)


def test_a_task_whose_state_is_no_image_is_refused():
    with pytest.raises(ParameterError, match="use spread=0"):
        energy_method(task="patch-sorting", spread=1e-4).setup(planned_steps=1)


def test_a_batch_of_one_image_is_refused_with_what_to_do(real_images):
    method = energy_method(spread=1e-4)
    method.setup(planned_steps=1)
    with pytest.raises(ParameterError, match="batch-size of at least 2"):
        method.loss(method.task(real_images[:1], torch.Generator().manual_seed(0)))


def test_the_term_adds_its_weighted_concentration_and_reaches_the_backbone(real_images):
    torch.manual_seed(0)
    off, on = energy_method(), energy_method(spread=0.5)
    on_model = on.setup(planned_steps=1)
    off.setup(planned_steps=1).load_state_dict(on_model.state_dict())
    sample = on.task(real_images, torch.Generator().manual_seed(0))
    paper, with_term = off.loss(sample), on.loss(sample)
    value = on.step_stats()["concentration"]
    assert 0 < value <= 1 and "concentration" not in off.step_stats()
    assert with_term.item() == pytest.approx(paper.item() + 0.5 * value, rel=1e-4)
    with_term.backward()
    assert on_model.backbone.blocks[-1].mlp.fc2.weight.grad.abs().sum() > 0


def test_training_with_the_term_spreads_real_images_features(real_images):
    torch.manual_seed(0)
    method = energy_method(spread=1.0, steps=1)
    model = method.setup(planned_steps=15)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        before = top_component_share(method.features(real_images))
    for _ in range(15):
        loss = method.loss(method.task(real_images, generator))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        after = top_component_share(method.features(real_images))
    assert after < 0.7 * before, (before, after)
