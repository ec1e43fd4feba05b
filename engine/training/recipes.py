"""Named optimiser recipes: the paper's Table A values, and a fast start for a short CPU run.

A recipe fills in every field below that the user left at None; a value given explicitly wins.
The resolved values are what the run's config.json and checkpoint record.
"""
import difflib

from pretexts.errors import ParameterError

RECIPES: dict[str, dict] = {
    # Appendix A, Table A (pretraining column) and A.1: alpha starts at 0.1 and trains with the network
    "paper": {"base_lr": 1e-4, "weight_decay": 0.05, "betas": (0.9, 0.95), "alpha": 0.1, "alpha_lr_scale": 1.0,
              "schedule": "cosine"},
    # README "Learning speed from a random start": 10x the base lr, alpha's log-step lr x400 so the step
    # size can grow to the size of the correction, and no decay, which stalls alpha's growth in a short run
    "fast": {"base_lr": 1e-3, "weight_decay": 0.05, "betas": (0.9, 0.95), "alpha": 0.1, "alpha_lr_scale": 400.0,
             "schedule": "constant"},
}


SCHEDULES = ("cosine", "constant")


def apply_recipe(cfg) -> None:
    """Fill cfg's None fields from its recipe; ParameterError (with close names) for an unknown recipe."""
    if cfg.recipe not in RECIPES:
        close = difflib.get_close_matches(str(cfg.recipe), RECIPES, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ParameterError(f"unknown recipe {cfg.recipe!r}; recipes: {', '.join(RECIPES)}.{hint}")
    for name, value in RECIPES[cfg.recipe].items():
        if getattr(cfg, name) is None:
            setattr(cfg, name, value)
    if cfg.schedule not in SCHEDULES:
        raise ParameterError(f"schedule must be one of {', '.join(SCHEDULES)}; got {cfg.schedule!r}.")
