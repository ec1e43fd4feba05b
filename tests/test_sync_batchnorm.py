"""`finetune` and `segment` under torchrun on GPUs sync their BatchNorm layers: timm's BatchNormAct2d (EfficientNet,
RegNet, ...) keeps its activation there, which torch's own conversion dropped."""

import copy

import timm
import torch
from timm.layers import BatchNormAct2d

from pretexts.engine.training.distributed import to_sync_batchnorm


def test_synced_batchnorm_keeps_timms_activation_and_the_same_parameters():
    model = timm.create_model("test_efficientnet", num_classes=0)
    fused = {
        n: m
        for n, m in model.named_modules()
        if isinstance(m, BatchNormAct2d) and not isinstance(m.act, torch.nn.Identity)
    }
    assert fused, "test_efficientnet has BatchNormAct2d layers with an activation"
    before = {name: copy.deepcopy(module).eval() for name, module in fused.items()}
    params = dict(model.named_parameters())
    assert to_sync_batchnorm(model) is model  # in place: an optimiser built before still holds the parameters
    assert all(param is params[name] for name, param in model.named_parameters())
    for name, original in before.items():
        synced = model.get_submodule(name).eval()
        assert isinstance(synced, torch.nn.SyncBatchNorm)
        inputs = torch.randn(2, original.num_features, 4, 4)
        torch.testing.assert_close(synced(inputs), original(inputs))  # the norm, then the activation, as before
