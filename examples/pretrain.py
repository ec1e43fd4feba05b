"""Pretrain a backbone through the Python API, then look at what it restores.

    python examples/pretrain.py

Reads top to bottom: a config, a run, the held-out report, and one restoration by hand. Everything is reached
from `import pretexts`.
"""

import torch
from torchvision.transforms.functional import pil_to_tensor

import pretexts
from pretexts.engine.data.datasets import build_source

# 1. A run is described by one typed config (defaults: the fast recipe, the embedded images; recipe="paper" is
#    Table A's optimiser). force=True starts the example's run over each time (a second run would otherwise refuse
#    the folder).
cfg = pretexts.PretrainConfig(task="colorization", backbone="convnext_atto", epochs=2, out="runs/example", force=True)
trainer = pretexts.Pretrainer(cfg)
results = trainer.run()  # results["held_out"]: the numbers, as results.json
print(trainer.held_out_now().format())  # the method's own held-out line

# 2. The same pieces by hand: a task corrupts, the energy model restores by gradient steps.
held_out = build_source("sample", "val")  # (PIL image, label) pairs, 32 x 32
images = torch.stack([pil_to_tensor(held_out[i][0]) for i in range(8)]).float() / 255
model = pretexts.create_energy_model("convnext_atto", img_size=32)
task = pretexts.prepare_task(pretexts.create_pretext("super-resolution", scale=4), model)  # as `train` does
sample = task(images, torch.Generator().manual_seed(0))  # sample.state: corrupted, sample.target: clean
states = pretexts.restore(model, task, sample, steps=2)  # differentiable: x <- x - alpha dE/dx
loss = pretexts.restoration_loss(states, sample.target)
loss.backward()  # reaches the backbone via double backward
print(
    f"{task.name}: loss {loss.item():.4f}, alpha {model.alpha.item():.3f}, "
    f"first-layer grad norm {model.backbone.stem[0].weight.grad.norm():.2e}"
)
