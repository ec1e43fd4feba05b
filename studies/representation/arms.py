"""The representation study's rows (representation.py): each named arm's method and overrides, and
its colour in the plots. Add a row here to add an arm to the study."""

from study_fills import STUDY_TASK  # registers the study's task: imported here, it is registered in every cell too

# energy-paper: the paper's optimiser recipe (Table A) instead of the fast default, to see what the default costs.
# The masks' fill is the default (gray) unless the name says otherwise; the cells measured before the fill
# parameter existed used black boxes and are kept under the -black names. The noise and mean fills are not the
# package's: they come with the study's own random-mask (study_fills.py).
BLACK = {"task_args": {"fill": "black"}}
NOISE, MEAN = ({"task": STUDY_TASK, "task_args": {"fill": fill}} for fill in ("noise", "mean"))
METHODS = {
    "energy": ("energy", {}),
    "energy-fd": ("energy", {"grad_mode": "finite-difference"}),
    "ae": ("ae", {}),
    "mae": ("mae", {}),
    "random": None,
    "energy-paper": ("energy", {"recipe": "paper"}),
    "energy-black": ("energy", BLACK),
    "energy-noise": ("energy", NOISE),
    "energy-mean": ("energy", MEAN),
    "ae-black": ("ae", BLACK),
    "energy-fd-black": ("energy", {"grad_mode": "finite-difference", **BLACK}),
    "energy-paper-black": ("energy", {"recipe": "paper", **BLACK}),
    "simmim": ("simmim", {}),
    # issue 39's arms on ViT: N = 1 (half the step), whole-patch masks at MAE's 75 % (gridded-mask cells of the
    # ViT's 4-pixel patch at 32 px), the compiled step, and average pooling in the head
    "energy-n1": ("energy", {"steps": 1}),
    "energy-patch75": ("energy", {"task": "gridded-mask", "task_args": {"grid": 4, "ratio": 0.75}}),
    "energy-compiled": ("energy", {"compile": "inductor"}),
    "mae-compiled": ("mae", {"compile": "inductor"}),
    "energy-avgpool": ("energy", {"global_pool": "avg"}),
    # does the raw-pixel loss reward a colour shift (restoration_shift.py)? The energy's loss without it,
    # and MAE with it (MAE's default targets are normalised per patch)
    "energy-centred": ("energy", {"loss": "patch-centred"}),
    "mae-rawpix": ("mae", {"norm_pix_loss": False}),
    # the centred loss (the ViT default since issue 39) with the arms that came closest without it
    "energy-centred-avgpool": ("energy", {"loss": "patch-centred", "global_pool": "avg"}),
    "energy-centred-patch75": (
        "energy",
        {"loss": "patch-centred", "task": "gridded-mask", "task_args": {"grid": 4, "ratio": 0.75}},
    ),
    "energy-centred-n1": ("energy", {"loss": "patch-centred", "steps": 1}),
    # a fifth of an epoch's warm-up (12 steps) where the default's one epoch is 63 of the ~100 steps at 15 CPU-minutes
    "energy-centred-warm02": ("energy", {"loss": "patch-centred", "warmup_epochs": 0.2}),
    # the other way: half the fast recipe's base lr (alpha's lr, x400 the network's, halves with it)
    "energy-centred-lr05": ("energy", {"loss": "patch-centred", "base_lr": 5e-4}),
    # the features' spread term (--method-arg spread): 1e-4 gives its gradient the restoration's size at init
    # on vit_tiny (backbone gradient norms 4.9 against 0.00064), 1e-5 a tenth of it
    "energy-centred-spread1e-4": ("energy", {"loss": "patch-centred", "spread": 1e-4}),
    "energy-centred-spread1e-5": ("energy", {"loss": "patch-centred", "spread": 1e-5}),
    # the energy read from blocks 3, 6, 9 and 12 (--method-arg read_layers=4): the restoration gradient reaches
    # the lower blocks directly, not only through the ones above
    "energy-centred-read4": ("energy", {"loss": "patch-centred", "read_layers": 4}),
    # two transformer blocks between the tokens and the head (--method-arg head_blocks=2), left behind by
    # fine-tuning as MAE's decoder is: the backbone's top blocks need not do the restoration's last work
    "energy-centred-head2": ("energy", {"loss": "patch-centred", "head_blocks": 2}),
    # MAE's encoder has fixed 2D sin-cos positions, the energy's ViT timm's learned ones from random: the
    # energy's attention stayed uniform in every block at 250 steps while MAE's grew local heads
    "energy-centred-sincos": ("energy", {"loss": "patch-centred", "positions": "sincos"}),
}
# one colour per row in every panel; grey is random init, as in `pretexts compare`'s plot
COLORS = {
    "energy": "C0",
    "energy-fd": "C9",
    "ae": "C2",
    "mae": "C3",
    "random": "C7",
    "energy-paper": "C5",
    "energy-black": "C1",
    "energy-noise": "C8",
    "energy-mean": "C6",
    "ae-black": "olive",
    "energy-fd-black": "navy",
    "energy-paper-black": "saddlebrown",
    "simmim": "C4",
    "energy-n1": "teal",
    "energy-patch75": "purple",
    "energy-compiled": "crimson",
    "mae-compiled": "darkred",
    "energy-avgpool": "orange",
    "energy-centred": "magenta",
    "mae-rawpix": "salmon",
    "energy-centred-avgpool": "gold",
    "energy-centred-patch75": "indigo",
    "energy-centred-n1": "darkcyan",
    "energy-centred-warm02": "deeppink",
    "energy-centred-lr05": "mediumvioletred",
    "energy-centred-spread1e-4": "limegreen",
    "energy-centred-spread1e-5": "darkgreen",
    "energy-centred-read4": "sienna",
    "energy-centred-head2": "goldenrod",
    "energy-centred-sincos": "orangered",
}
VIT_ONLY = {"mae", "mae-compiled", "mae-rawpix"}
OWN_MASKS = {"mae", "simmim"}  # they ignore --task
