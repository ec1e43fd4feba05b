"""Named optimiser recipes: the paper's Table A values, a fast start for a short CPU run, and SimMIM's.

A recipe fills in every field below that the user left at None; a value given explicitly wins.
The resolved values are what the run's config.json and checkpoint record; config.json also notes them as derived
(engine/training/config_record.py), so a `--config` of it with another recipe takes that recipe's. A method whose
own options differ between recipes declares those defaults itself (`Method.recipe_defaults`: the energy method's
alpha lr).
"""

from pretexts.engine.training.config_record import RECIPE_APPLIED, note_derived
from pretexts.errors import ParameterError, suggest

RECIPES: dict[str, dict] = {
    # Appendix A, Table A (pretraining column)
    "paper": {"base_lr": 1e-4, "weight_decay": 0.05, "betas": (0.9, 0.95), "schedule": "cosine"},
    # docs/results/learning-speed.md: 10x the base lr, so that the energy method's step size grows in a short run
    # (the method raises alpha's lr x400 in this recipe); the lr decays only where a long run needs it (AUTO_SCHEDULE)
    "fast": {"base_lr": 1e-3, "weight_decay": 0.05, "betas": (0.9, 0.95), "schedule": "auto"},
    # microsoft/SimMIM's pretraining configs (vit_base / swin_base, 800 epochs): BASE_LR 1e-4 per 512 images,
    # AdamW betas (0.9, 0.999), weight decay 0.05, gradient clip 5.0; their multistep decay (x0.1 at epoch 700
    # of 800) is read as cosine here, and their 10 warm-up epochs are `--warmup-epochs 10`
    "simmim": {"base_lr": 5e-5, "weight_decay": 0.05, "betas": (0.9, 0.999), "schedule": "cosine", "clip_grad": 5.0},
}


AUTO_SCHEDULE = "auto"
SCHEDULES = ("cosine", "constant", AUTO_SCHEDULE)
# the demo's length (40 epochs of 5 steps on the embedded images): a run planned longer decays under auto
DEMO_STEPS = 200


def apply_recipe(cfg) -> None:
    """Fill cfg's None fields from its recipe, noting them as derived (config.json records which, so a `--config`
    of it with another recipe takes that recipe's); ParameterError (with close names) for an unknown recipe."""
    if cfg.recipe not in RECIPES:
        raise ParameterError(
            f"unknown recipe {cfg.recipe!r}; recipes: {', '.join(RECIPES)}.{suggest(cfg.recipe, RECIPES, 1)}"
        )
    for name, value in RECIPES[cfg.recipe].items():
        if getattr(cfg, name) is None:
            setattr(cfg, name, value)
            note_derived(cfg, name)
    vars(cfg)[RECIPE_APPLIED] = cfg.recipe
    if cfg.schedule not in SCHEDULES:
        raise ParameterError(f"schedule must be one of {', '.join(SCHEDULES)}; got {cfg.schedule!r}.")


def resolved_schedule(schedule: str, method: str, backbone, planned_steps: int) -> str:
    """`schedule`, with auto resolved: cosine to the planned end for the energy method on a ViT planned past the
    demo's steps (with a constant lr its fine-tuned score falls as the run goes on; docs/results/length.md),
    constant for the rest (a short run, other backbones and methods, as measured)."""
    if schedule != AUTO_SCHEDULE:
        return schedule
    from timm.models.vision_transformer import VisionTransformer  # here: `import pretexts` loads no torch or timm

    long_vit = method == "energy" and isinstance(backbone, VisionTransformer) and planned_steps > DEMO_STEPS
    return "cosine" if long_vit else "constant"


def schedule_line(asked: str, resolved: str, planned_steps: int, resumed: bool = False) -> str | None:
    """The start line naming what `--schedule auto` resolved to (or, `resumed`, kept from the checkpoint), None
    when a schedule was given."""
    if asked != AUTO_SCHEDULE:
        return None
    if resumed:
        return f"schedule auto: {resolved}, as the resumed run chose when it started"
    if resolved == "cosine":
        return f"schedule auto: cosine to step {planned_steps} (an energy run on a ViT planned past {DEMO_STEPS} steps)"
    return f"schedule auto: constant after the warm-up (cosine only for an energy run on a ViT past {DEMO_STEPS} steps)"
