"""MAE's linear-probe protocol (main_linprobe.py; the paper reports a linear-probe number in Table B without stating
its protocol) as `pretexts finetune --linear-probe`.

Every weight of the classifier is frozen but its last linear layer, before which goes a BatchNorm without affine
(eps 1e-6); the frozen backbone runs in eval mode, so a CNN's BatchNorm statistics stay as loaded and drop path is
off. timm's LARS (momentum 0.9) trains the head: the weight's step scaled by its trust ratio whatever the weight
decay, the bias's plain, as MAE's own LARS (util/lars.py) treats 1-d parameters. checkpoint.pt keeps the BatchNorm
apart for `--resume`; finetuned.pt and best.pt fold its running statistics into the linear layer, so they hold the
plain timm classifier (`classifier_state`).
"""

from timm.layers import trunc_normal_
from timm.optim import Lars
from torch import nn

from pretexts.errors import ParameterError

PROTOCOL = "linear probe (MAE's: frozen backbone, BatchNorm without affine + linear head, LARS)"
FINE_TUNE = "fine-tune (every weight trained)"
NORM_EPS = 1e-6  # MAE's
LARS_MOMENTUM = 0.9
HEAD_INIT_STD = 0.01  # MoCo v3's, as MAE's linear probe initialises the classifier


class ProbeHead(nn.Sequential):
    """MAE's linear-probe head: BatchNorm1d without affine over the features, then the classifier."""

    def __init__(self, classifier: nn.Linear):
        super().__init__(nn.BatchNorm1d(classifier.in_features, affine=False, eps=NORM_EPS), classifier)


def protocol(linear_probe: bool) -> str:
    """What a fine-tuning run trained, in words, as its results.json and its export's pretexts.json say."""
    return PROTOCOL if linear_probe else FINE_TUNE


def classifier_module_name(model: nn.Module) -> str | None:
    """The module name of a timm classifier's final layer (`head`, `head.fc`, `fc`); None where `get_classifier`
    gives no one module of the model."""
    classifier = model.get_classifier()
    return next((name for name, module in model.named_modules() if module is classifier), None)


def classifier_name(model: nn.Module) -> str:
    """`classifier_module_name`, refused in one line where that layer is not linear."""
    classifier = model.get_classifier()
    if not isinstance(classifier, nn.Linear):
        raise ParameterError(
            f"--linear-probe trains a linear classifier, and this backbone's is a {type(classifier).__name__}; "
            f"fine-tune it without --linear-probe, or probe its features with `pretexts probe`."
        )
    return classifier_module_name(model)


def attach_probe_head(model: nn.Module) -> ProbeHead:
    """Freeze `model`, re-initialise its classifier as MAE's (truncated normal, std 0.01; bias 0) and put the
    BatchNorm before it; the head is all that trains."""
    name = classifier_name(model)
    classifier = model.get_submodule(name)
    trunc_normal_(classifier.weight, std=HEAD_INIT_STD)
    nn.init.zeros_(classifier.bias)
    head = ProbeHead(classifier)
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, head)
    model.requires_grad_(False)
    head.requires_grad_(True)
    return head


def train_mode(model: nn.Module) -> None:
    """`model.train()`, but where it holds a linear-probe head only that head trains: the backbone stays in eval."""
    heads = [module for module in model.modules() if isinstance(module, ProbeHead)]
    model.train(not heads)
    for head in heads:
        head.train()


def lars_for_head(model: nn.Module, lr: float, weight_decay: float) -> Lars:
    """timm's LARS over the trainable parameters: weights (2-d) adapted by their trust ratio and decayed, biases
    neither (MAE's LARS leaves 1-d parameters alone)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return Lars(
        [
            {"params": [p for p in trainable if p.ndim > 1], "always_adapt": True},
            {"params": [p for p in trainable if p.ndim <= 1], "weight_decay": 0.0},
        ],
        lr=lr,
        momentum=LARS_MOMENTUM,
        weight_decay=weight_decay,
    )


def fold_head(state: dict, name: str) -> dict:
    """`state` with the linear-probe head at `name` folded into one linear layer under the classifier's own keys: in
    eval the BatchNorm gives (x - mean) / sqrt(var + eps), so W' = W / sqrt(var + eps) and b' = b - W' mean."""
    prefix = f"{name}."
    weight, bias = state[f"{prefix}1.weight"], state[f"{prefix}1.bias"]
    scale = (state[f"{prefix}0.running_var"].double() + NORM_EPS).rsqrt()
    folded_weight = weight.double() * scale
    folded = {
        f"{prefix}weight": folded_weight.to(weight.dtype),
        f"{prefix}bias": (bias.double() - folded_weight @ state[f"{prefix}0.running_mean"].double()).to(bias.dtype),
    }
    plain = {}
    for key, value in state.items():
        if not key.startswith(prefix):
            plain[key] = value
        elif key == f"{prefix}1.weight":  # the folded layer where the classifier's keys were
            plain.update(folded)
    return plain


def classifier_state(model: nn.Module) -> dict:
    """`model.state_dict()` as the plain timm classifier: each linear-probe head folded (`fold_head`)."""
    state = model.state_dict()
    for name, module in model.named_modules():
        if isinstance(module, ProbeHead):
            state = fold_head(state, name)
    return state


def plain_classifier_state(state: dict, model: nn.Module) -> dict:
    """A fine-tuning checkpoint's `state` for `model`, the plain timm classifier: a linear probe's checkpoint.pt
    holds its head's BatchNorm apart (for `--resume`), folded here; any other state is returned as it is."""
    name = classifier_module_name(model)
    return fold_head(state, name) if name and f"{name}.0.running_var" in state else state
