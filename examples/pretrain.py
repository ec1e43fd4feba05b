"""Pretrain a backbone through the Python API, then look at what it restores.

    python examples/pretrain.py

Reads top to bottom: a config, a run, the held-out report, and one restoration by hand.
"""
import torch

import backbones
import engine
import pretexts

# 1. A run is described by one typed config (defaults: the paper's optimiser, the embedded images).
cfg = engine.PretrainConfig(task="colorization", backbone="resnet18", epochs=2, out="runs/example")
results = engine.pretrain(cfg)
print(engine.format_held_out(results["held_out"]))

# 2. The same pieces by hand: a task corrupts, the energy model restores by gradient steps.
task = pretexts.create_pretext("super-resolution", scale=4) if "super-resolution" in pretexts.list_pretexts() \
    else pretexts.create_pretext("colorization")
model = backbones.create_energy_model("resnet18", img_size=32)
images = torch.rand(4, 3, 32, 32)
sample = task(images, torch.Generator().manual_seed(0))
states = engine.restore(model, task, sample, steps=2)          # differentiable: x <- x - alpha dE/dx
loss = engine.restoration_loss(states, sample.target)
loss.backward()                                                 # reaches the backbone via double backward
print(f"{task.name}: loss {loss.item():.4f}, alpha {model.alpha.item():.3f}, "
      f"backbone grad norm {model.backbone.conv1.weight.grad.norm():.2e}")
