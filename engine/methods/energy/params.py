"""The energy method's options (`--method-arg KEY=VALUE`, and each its own `train` flag): the paper's N, loss,
step size and head, how dE/dx reaches the weights, and a ViT's positions."""

from pretexts.backbones.vit_tokens import AUTO_POSITIONS, POSITIONS
from pretexts.engine.methods.energy.grad_modes import FD_DELTA, GRAD_MODES
from pretexts.engine.methods.energy.restore import LOSSES, PATCH_CENTRED
from pretexts.engine.modules.second_order import DOUBLE_BACKWARDS
from pretexts.params import Param

AUTO_LOSS = "auto"  # resolved at setup (resolved_loss), recorded in config.json as what ran

ENERGY_PARAMS = {
    # the paper's N is 2; 0 takes no step: the corrupted images are negatives (Fig. A). Each step keeps its graph
    # for the backward, so time and memory grow with N: 64 is 32 times the paper's
    "steps": Param(2, int, 0, 64, help="Restoration steps N (paper: 2); 0: the corrupted images as negatives."),
    "loss": Param(
        AUTO_LOSS,
        str,
        choices=(AUTO_LOSS, *LOSSES, PATCH_CENTRED),
        help='"mse" (eq. 5), "smooth_l1" (appendix pseudo code), "patch-centred" (the error less its mean '
        "over each patch: a colour shift earns nothing, as with MAE's per-patch normalised targets) or auto: "
        "patch-centred for a ViT with a masking task, where it measured better, else mse.",
    ),
    # the positive ones below stop 0 (no step, no gradient) and typos of many orders of magnitude
    "alpha": Param(0.1, float, 1e-6, 100.0, help="Initial restoration step size (Appendix A.1: 0.1)."),
    "alpha_lr_scale": Param(
        400.0,
        float,
        0.0,
        1e6,
        help="alpha's lr relative to the network's; by --recipe: fast 400, paper 1 (Appendix A.1); 0 keeps alpha "
        "at its initial value.",
    ),
    "head_init_std": Param(
        None, float, 1e-6, 100.0, help="Std of the energy head's initial weights (default: PyTorch's Linear init)."
    ),
    # up to float32's largest: a huge scale overflows to a NaN loss, which the run stops on and keeps its checkpoint
    "energy_scale": Param(1.0, float, 1e-6, 3e38, help="Multiplier of the energy."),
    "grad_mode": Param(
        "exact",
        str,
        choices=GRAD_MODES,
        help="exact: double backward (paper). finite-difference: two first-order passes per step, "
        "allows fused attention; smooth backbones only (ViT, Swin, ConvNeXt).",
    ),
    # images are in [0, 1]: a larger perturbation is no derivative
    "fd_delta": Param(FD_DELTA, float, 1e-6, 1.0, help="Finite-difference perturbation (RMS per element)."),
    "double_backward": Param(
        "auto",
        str,
        choices=DOUBLE_BACKWARDS,
        help="Exact mode's convolutions and BatchNorms: rewritten (the same gradients, a cheaper double "
        "backward) or autograd's own; auto: both rewritten on CUDA, BatchNorm alone on the CPU, where each "
        "measured faster (docs/performance.md).",
    ),
    # last: error messages list the arguments in this order
    "loss_patch": Param(None, int, 1, 4096, help="patch-centred's patch in pixels (default: the ViT's patch, else 8)."),
    # the paper fixes sin-cos positions for patch sorting (Appendix A.2); MAE's and MoCo v3's encoders have them.
    # auto (sincos on a ViT) resolves when the model is built; config.json records what it resolved to
    "positions": Param(
        AUTO_POSITIONS,
        str,
        choices=POSITIONS,
        help="A ViT's patch positions: sincos (the fixed 2D sin-cos table, as MAE's encoder has them; fine-tuning "
        "trains them on), learned (timm's, from random) or auto: sincos for a ViT with absolute positions, where "
        "it measured better, else learned.",
    ),
}
