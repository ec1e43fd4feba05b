"""N = 0 (paper, Appendix Fig. A): no restoration step, the corrupted images are the negatives."""

import math

import torch
from cli_runs import TRAIN, one_torch_thread, run_cli  # noqa: F401 (a fixture)

import pretexts
from pretexts.engine.methods.energy import restoration_error
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.energy.restore import contrastive_loss


class FixedEnergy(torch.nn.Module):
    """E(x) = sum of pixels: a hand-checkable energy with alpha for the task hooks."""

    def __init__(self):
        super().__init__()
        self.alpha = torch.tensor(0.1)

    def energy(self, x):
        return x.flatten(1).sum(1)


def test_the_loss_is_softplus_of_the_energy_difference():
    task = pretexts.create_pretext("colorization")
    clean = torch.zeros(2, 3, 4, 4)
    clean[0] = 0.5  # grayscale of a gray image is itself: E(x) = E(x0), loss log 2
    clean[1, 0] = 1.0  # pure red: grayscale 0.299 per channel, E(x0) = 3 * 16 * 0.299 > E(x) = 16
    sample = task(clean)
    loss = contrastive_loss(FixedEnergy(), task, sample)
    e_clean, e_corrupt = torch.tensor([24.0, 16.0]), sample.state.flatten(1).sum(1)
    assert math.isclose(e_corrupt[0].item(), 24.0, rel_tol=1e-4)
    expected = torch.nn.functional.softplus(e_clean - e_corrupt).mean()
    assert math.isclose(loss.item(), expected.item(), rel_tol=1e-5)
    assert math.isclose(
        expected.item(), (math.log(2) + math.log1p(math.exp(16 - e_corrupt[1].item()))) / 2, rel_tol=1e-5
    )


def test_gradients_reach_the_backbone_and_the_loss_falls_on_real_images(real_images, held_out_images):
    torch.manual_seed(0)
    model = create_energy_model("convnext_atto", img_size=32)
    task = pretexts.create_pretext("colorization")
    sample = task(real_images)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = restoration_error(model, task, [held_out_images], 0, "cpu").extra["ranked_right"]
    losses = []
    for step in range(15):
        loss = contrastive_loss(model, task, sample)
        optimizer.zero_grad()
        loss.backward()
        if step == 0:
            assert model.backbone.stem[0].weight.grad.abs().sum() > 0
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    after = restoration_error(model, task, [held_out_images], 0, "cpu")
    assert after.restored_mse == [] and after.extra["ranked_right"] >= max(before + 0.3, 0.75), (
        before,
        after,
    )  # 0.34 -> 0.84


def test_cli_trains_with_zero_steps_and_reports_the_ranking(tmp_path):
    result, error = run_cli(
        [
            *TRAIN,
            "--steps",
            "0",
            "--epochs",
            "1",
            "--max-steps-per-epoch",
            "2",
            "--workers",
            "0",
            "--task",
            "colorization",
            "--out",
            tmp_path / "run",
        ]
    )
    assert result.exit_code == 0, error or result.output
    assert "(N = 0, nothing restored): the energy ranks the clean image below the corrupted one for" in result.output
    assert (tmp_path / "run" / "restoration_epoch001.png").is_file()
