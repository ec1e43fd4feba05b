"""A Pretrainer at the tests' tiny size: batch 4 of synthetic images, no loader workers, lr 1e-3 from the first step
(no warm-up), so one `train_step` visibly moves the weights."""

from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.loop import Pretrainer


def tiny_trainer(out, **overrides) -> Pretrainer:
    settings = dict(batch_size=4, data="synthetic", workers=0, lr=1e-3, warmup_epochs=0, out=str(out))
    return Pretrainer(PretrainConfig(**{**settings, **overrides}))
