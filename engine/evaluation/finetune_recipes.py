"""Named fine-tuning recipes: the paper's Table A, the small-data recipe behind the project's own tables, and MAE's
linear probe (`linprobe`, which `--linear-probe` takes and nothing else does).

A recipe fills every field of `FINETUNE_RECIPES` that the user left at None; a value given explicitly wins. `auto`
(the default) picks one from the number of training images and the image size once the data is read
(`resolve_recipe`; with `--linear-probe` it takes `linprobe`); config.json and the checkpoint record the name picked
and the values used, so a resumed run keeps them, and config.json notes them as derived, so a `--config` of it picks
and fills them again. The fields not listed (batch 64, AdamW's betas 0.9 / 0.999, min lr 1e-6, the mixing probabilities)
are the same in all and stay plain defaults of `FinetuneConfig`.
"""

from pretexts.engine.training.config_record import RECIPE_APPLIED, note_derived
from pretexts.errors import ParameterError, suggest

LINEAR_PROBE_RECIPE = "linprobe"
FINETUNE_RECIPES: dict[str, dict] = {
    # Appendix A, Table A (fine-tuning column); 100 epochs, the paper's ViT-B fine-tune (Table 3: ViT-S 200, ViT-L
    # 50), and MAE's 5 warm-up epochs.
    # RandAugment (9, 0.5) with MAE's increasing ops ("-inc1"); magnitudes capped at 9 ("-mmax9"), since the
    # noisy magnitude's top (10) posterizes to 0 bits, which current Pillow refuses
    "paper": {
        "epochs": 100,
        "warmup_epochs": 5.0,
        "base_lr": 1e-3,
        "layer_decay": 0.75,
        "drop_path": 0.1,
        "randaug": "rand-m9-mstd0.5-inc1-mmax9",
        "crop_min_scale": 0.08,
        "crop_pct": 0.875,
        "smoothing": 0.1,
        "mixup": 0.8,
        "cutmix": 1.0,
        "weight_decay": 0.05,
    },
    # what docs/results/quality.md and docs/results/representation.md fine-tuned 4,068 images of 32 px with (their
    # scripts and `pretexts compare`); 15 epochs: random init stops improving by epoch 12 there
    "small": {
        "epochs": 15,
        "warmup_epochs": 1.0,
        "base_lr": 4e-3,
        "layer_decay": 0.75,
        "drop_path": 0.1,
        "randaug": "none",
        "crop_min_scale": 0.35,
        "crop_pct": 1.0,
        "smoothing": 0.1,
        "mixup": 0.0,
        "cutmix": 0.0,
        "weight_decay": 0.05,
    },
    # MAE's linear-probe protocol, main_linprobe.py (the paper's Table B reports a linear-probe number without
    # stating its protocol): 90 epochs, 10 warm-up, LARS at base lr 0.1 without weight decay, RandomResizedCrop and
    # flip alone, evaluation at 0.875 (its cosine ends at 0: the min lr's 1e-6 is 4e-5 of the peak at batch 64); the
    # optimiser is linear_probe_protocol.py's, so `--linear-probe` alone takes it
    LINEAR_PROBE_RECIPE: {
        "epochs": 90,
        "warmup_epochs": 10.0,
        "base_lr": 0.1,
        "layer_decay": 1.0,
        "drop_path": 0.0,
        "randaug": "none",
        "crop_min_scale": 0.08,
        "crop_pct": 0.875,
        "smoothing": 0.0,
        "mixup": 0.0,
        "cutmix": 0.0,
        "weight_decay": 0.0,
    },
}
RECIPE_NAMES = ("auto", *FINETUNE_RECIPES)

# `auto` gives Table A only to data like the paper's on both counts: enough images for its heavy regularisation
# (the small recipe is made for a few thousand) and images large enough that its smallest crop, 8 % of the area,
# keeps as many pixels as the small recipe's crops of 32 px images; smaller images it would crop to a few pixels.
# Why these two thresholds: docs/recipes.md, "Why this rule".
AUTO_MIN_IMAGES = 10_000
AUTO_MIN_IMG_SIZE = 64


def recipe_defaults(name: str) -> str:
    """What each recipe gives a field, for its --help: 'paper 100, small 15'."""
    shown = {recipe: values[name] for recipe, values in FINETUNE_RECIPES.items()}
    return ", ".join(f"{recipe} {value if isinstance(value, str) else f'{value:g}'}" for recipe, value in shown.items())


def check_recipe_name(name) -> None:
    if name not in RECIPE_NAMES:
        raise ParameterError(
            f"unknown fine-tuning recipe {name!r}; recipes: {', '.join(RECIPE_NAMES)}.{suggest(name, RECIPE_NAMES, 1)}"
        )


def auto_candidates(linear_probe: bool) -> tuple[str, ...]:
    """The recipes `auto` may pick: `linprobe` alone under --linear-probe, else `small` or `paper` by the data."""
    return (LINEAR_PROBE_RECIPE,) if linear_probe else ("small", "paper")


def note_recipe_applied(cfg) -> None:
    """Note on `cfg` the fields that chose the values just filled: `expect_config` refuses a config on which one was
    set since (`cfg.linear_probe = True` would keep a fine-tune's weight decay, looking given)."""
    vars(cfg)[RECIPE_APPLIED] = {"recipe": cfg.recipe, "linear_probe": cfg.linear_probe}


def apply_agreed_values(cfg) -> None:
    """Under `auto`, fill at once the None fields every recipe it may pick agrees on (the weight decay, ...), noted
    as derived: what is left open is what the data decides."""
    candidates = [FINETUNE_RECIPES[name] for name in auto_candidates(cfg.linear_probe)]
    for name, value in candidates[0].items():
        if getattr(cfg, name) is None and all(recipe[name] == value for recipe in candidates):
            setattr(cfg, name, value)
            note_derived(cfg, name)
    note_recipe_applied(cfg)


def auto_recipe(train_images: int, img_size: int, linear_probe: bool = False) -> tuple[str, str]:
    """(recipe, why) for `auto`: 'linprobe' under --linear-probe; else 'small' for fewer than AUTO_MIN_IMAGES training
    images or images smaller than AUTO_MIN_IMG_SIZE px, 'paper' otherwise."""
    if linear_probe:
        return LINEAR_PROBE_RECIPE, "auto: --linear-probe takes MAE's linear-probe recipe"
    if train_images < AUTO_MIN_IMAGES:
        return "small", f"auto: {train_images:,} training images < {AUTO_MIN_IMAGES:,}; --recipe paper for Table A"
    if img_size < AUTO_MIN_IMG_SIZE:
        return "small", f"auto: {img_size} px images < {AUTO_MIN_IMG_SIZE} px; --recipe paper for Table A"
    return "paper", (
        f"auto: {train_images:,} training images >= {AUTO_MIN_IMAGES:,}, {img_size} px >= {AUTO_MIN_IMG_SIZE} px; "
        f"--recipe small for the small-data recipe"
    )


def apply_finetune_recipe(cfg) -> list[str]:
    """Fill cfg's None fields from its (named) recipe, noting them as derived (a `--config` of the run's config.json
    with another recipe takes that recipe's); the fields that were given, which kept their values."""
    given = []
    for name, value in FINETUNE_RECIPES[cfg.recipe].items():
        if getattr(cfg, name) is None:
            setattr(cfg, name, value)
            note_derived(cfg, name)
        elif getattr(cfg, name) != value:
            given.append(name)
    note_recipe_applied(cfg)
    return given


def resolve_recipe(cfg, train_images: int, img_size: int) -> str:
    """Name cfg's recipe (`auto` picks by the data), fill its fields and check them; the start line's words:
    'recipe small (auto: 320 training images < 10,000; --recipe paper for Table A)'."""
    why = None
    if cfg.recipe == "auto":
        cfg.recipe, why = auto_recipe(train_images, img_size, cfg.linear_probe)
    given = apply_finetune_recipe(cfg)
    cfg.check_resolved()
    notes = [why] if why else []
    if given:
        notes.append("given: " + ", ".join("--" + name.replace("_", "-") for name in given))
    return f"recipe {cfg.recipe}" + (f" ({'; '.join(notes)})" if notes else "")
