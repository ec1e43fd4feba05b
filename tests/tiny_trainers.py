"""A Pretrainer at the tests' tiny size: batch 4 of synthetic images, no loader workers, lr 1e-3 from the first step
(no warm-up), so one `train_step` visibly moves the weights; and the energy method on a smaller ViT."""

import torch

import pretexts
from pretexts.engine.methods.energy.method import EnergyMethod
from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.loop import Pretrainer


def tiny_trainer(out, **overrides) -> Pretrainer:
    settings = dict(batch_size=4, data="synthetic", workers=0, lr=1e-3, warmup_epochs=0, out=str(out))
    return Pretrainer(PretrainConfig(**{**settings, **overrides}))


def small_energy_method(build_model, task: str = "random-mask", **method_args):
    """The energy method for vit_tiny at 32 px, its model `build_model(args)` (a smaller ViT than the alias's)."""

    class SmallEnergy(EnergyMethod):
        def build_model(self):
            return build_model(self.args)

    cfg = PretrainConfig(backbone="vit_tiny", img_size=32, task=task, method_args=method_args)
    return SmallEnergy(cfg, pretexts.create_pretext(task), torch.device("cpu"))
