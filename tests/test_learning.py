"""The method learns: on real images, colorization steps lower the loss and restore colour."""
import torch
import torch.nn.functional as F

import backbones
import pretexts
from engine import restoration_loss, restore


def test_colorization_steps_lower_the_loss_and_restore_colour(real_images):
    torch.manual_seed(0)
    model = backbones.create_energy_model("convnext_atto", img_size=32)
    task = pretexts.create_pretext("colorization")
    sample = task(real_images)  # a fixed batch of 16 real CIFAR-10 images
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.05)
    losses = []
    for _ in range(40):
        loss = restoration_loss(restore(model, task, sample, steps=2), sample.target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.8 * losses[0], losses

    model.eval()
    with torch.no_grad():
        restored = restore(model, task, sample, steps=2)[-1]
    corrupted_error = F.mse_loss(sample.state, sample.target)
    assert F.mse_loss(restored, sample.target) < 0.9 * corrupted_error
