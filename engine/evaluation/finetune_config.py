"""The typed configuration of a fine-tuning run. The recipe fields default to a named recipe
(engine/evaluation/finetune_recipes.py): `paper` (Appendix A, Table A), `small`, or `auto`, which picks by the data."""

import os
from dataclasses import asdict, dataclass

from pretexts.engine.evaluation.finetune_recipes import (
    AUTO_MIN_IMAGES,
    AUTO_MIN_IMG_SIZE,
    LINEAR_PROBE_RECIPE,
    RECIPE_NAMES,
    apply_agreed_values,
    apply_finetune_recipe,
    check_recipe_name,
    recipe_defaults,
)
from pretexts.engine.training.settings import (
    BATCH_RANGE,
    BETAS_RANGE,
    EPOCHS_RANGE,
    FRACTION_RANGE,
    IMG_SIZE_RANGE,
    LR_RANGE,
    MIN_LR_RANGE,
    POOLS,
    SEED_RANGE,
    STEPS_RANGE,
    WARMUP_EPOCHS_RANGE,
    WEIGHT_DECAY_RANGE,
    WORKERS_RANGE,
    Range,
    amp_setting,
    check_amp,
    check_field_types,
    check_global_pool,
    check_optimizer,
    check_positions,
    check_ranges,
    clip_grad_setting,
    cudnn_benchmark_setting,
    from_values,
    log_every_setting,
    max_images_setting,
    positions_setting,
    setting,
    skip_nonfinite_setting,
    tf32_setting,
)
from pretexts.errors import ParameterError

RANDAUG_OFF = ("", "none", "off", "0")
ADAMW_BETAS = (0.9, 0.999)


def by_recipe(name: str, help: str, section: str, range=None):
    """A field the fine-tuning recipe fills: None until resolved, its help naming what each recipe gives."""
    return setting(None, f"{help} Default: the recipe's ({recipe_defaults(name)}).", section=section, range=range)


@dataclass
class FinetuneConfig:
    """Everything `engine.finetune` needs; the CLI builds one of these, so does the Python API.

    `checkpoint` is a `pretexts train` checkpoint; `from_scratch` runs the same recipe on a randomly
    initialised `backbone` instead (the supervised baseline). `data` left out is the checkpoint's pretraining
    data, or the embedded sample from scratch (a random backbone records none); `Finetuner` fills it in.
    The fields left at None take `recipe`'s values: at once for a named recipe, once `Finetuner` has read the data
    for `auto` (at once those every recipe it may pick agrees on). `linear_probe` runs MAE's linear probe instead
    of a fine-tune (engine/evaluation/linear_probe_protocol.py), on the `linprobe` recipe. `recipe` and
    `linear_probe` choose the values filled in, so give them when building the config: either set afterwards is
    refused when the run starts. The batch is smaller than the paper's 1024 so the default fits small data, and the
    lr keeps the paper's scaling rule base_lr x batch / 256.
    """

    checkpoint: str | None = setting(None, "A checkpoint.pt written by `pretexts train`.", section="model")
    from_scratch: bool = setting(False, "Same recipe on a random backbone (the baseline).", section="model")
    linear_probe: bool = setting(
        False,
        "MAE's linear-probe protocol instead of a fine-tune: the backbone frozen (in eval mode), a "
        "BatchNorm without affine and a linear head trained with LARS on augmented images, recipe linprobe. "
        "finetuned.pt holds the BatchNorm folded into the linear layer: a plain timm classifier.",
        section="model",
    )
    backbone: str | None = setting(
        None, "With --from-scratch: alias (resnet18, vit_tiny, ...) or timm name.", section="model"
    )
    positions: str = positions_setting()
    global_pool: str | None = setting(
        None,
        "The classifier's pooling: avg (the patch tokens' mean, as MAE fine-tunes) or token (a ViT's class token). "
        "Default: the checkpoint's (the backbone's own with --from-scratch). A ViT pooled otherwise than in "
        "pretraining starts its final norm afresh, as MAE's fine-tuning does.",
        choices=POOLS,
        section="model",
    )
    img_size: int | None = setting(
        None,
        "Default: a checkpoint's own, 32 with --from-scratch. Another size than the checkpoint's rebuilds the "
        "backbone there, a ViT's position table resampled, a Swin's relative position tables resized (as MAE "
        "fine-tunes at 384 px).",
        section="data",
        range=IMG_SIZE_RANGE,
    )
    # None: the checkpoint's pretraining data (its config records it); the embedded sample with --from-scratch
    data: str | None = setting(
        None,
        "A folder with train/ and val/ class folders (class folders alone: 5 % of each class is held out as val, "
        "the same whatever --seed), labelled shards, or 'sample' (embedded). Default: the data the checkpoint was "
        "pretrained on; 'sample' with --from-scratch.",
        section="data",
    )
    label_fraction: float | None = setting(
        None,
        "Fine-tune on a class-balanced seeded subset: 0.01 or 0.1 (the paper's semi-supervised rows).",
        section="data",
        range=FRACTION_RANGE,
    )
    max_images: int = max_images_setting()
    recipe: str = setting(
        "auto",
        f"Defaults of the fields marked 'the recipe's': 'paper' (Table A: RandAugment, mixup, cutmix), 'small' (the"
        f" project's small-data recipe: none of them), '{LINEAR_PROBE_RECIPE}' (MAE's linear probe: --linear-probe"
        f" alone), or 'auto': '{LINEAR_PROBE_RECIPE}' with --linear-probe, else 'small' under {AUTO_MIN_IMAGES:,}"
        f" training images or {AUTO_MIN_IMG_SIZE} px, else 'paper'. Explicit options win.",
        choices=RECIPE_NAMES,
        section="optimisation",
    )
    # None: the recipe's (FINETUNE_RECIPES)
    epochs: int | None = by_recipe("epochs", "Fine-tuning epochs.", "optimisation", range=EPOCHS_RANGE)
    warmup_epochs: float | None = by_recipe(
        "warmup_epochs", "Linear warm-up epochs.", "optimisation", range=WARMUP_EPOCHS_RANGE
    )
    batch_size: int = setting(64, "Batch size of each optimiser step.", section="optimisation", range=BATCH_RANGE)
    accum_iter: int = setting(
        1,
        "Gradient accumulation: run each step's batch as this many micro-batches (the memory"
        " of batch / K images, the step of the whole batch).",
        section="speed",
        range=BATCH_RANGE,
    )
    lr: float | None = setting(None, "Peak lr. Default base lr x batch / 256.", section="optimisation", range=LR_RANGE)
    base_lr: float | None = by_recipe("base_lr", "lr per 256 images.", "optimisation", range=LR_RANGE)
    min_lr: float = setting(1e-6, "End of the cosine decay.", section="optimisation", range=MIN_LR_RANGE)
    weight_decay: float | None = by_recipe(
        "weight_decay",
        "Weight decay: AdamW's (Table A), LARS's under --linear-probe (biases get none).",
        "optimisation",
        range=WEIGHT_DECAY_RANGE,
    )
    betas: tuple = setting(
        ADAMW_BETAS,
        "AdamW's betas; refused with --linear-probe (its LARS has none).",
        metavar="B1 B2",
        nargs=2,
        section="optimisation",
        range=BETAS_RANGE,
    )
    layer_decay: float | None = by_recipe(
        "layer_decay", "Layer-wise lr decay; 1 turns it off.", "optimisation", range=FRACTION_RANGE
    )
    # at 1 every residual branch is dropped: the backbone is its stem alone
    drop_path: float | None = by_recipe(
        "drop_path", "Stochastic depth rate.", "optimisation", range=Range(0, 1, high_open=True)
    )
    # "none" turns it off
    randaug: str | None = by_recipe("randaug", "timm RandAugment policy; 'none' turns it off.", "augmentation")
    crop_min_scale: float | None = by_recipe(
        "crop_min_scale", "RandomResizedCrop's smallest area.", "augmentation", range=FRACTION_RANGE
    )
    reprob: float = setting(
        0.0,
        "Random erasing's probability (timm's RandomErasing: one box of per-pixel noise, after normalising); "
        "0 turns it off, as in Table A; MAE's fine-tuning uses 0.25.",
        section="augmentation",
        range=Range(0, 1),
    )
    # evaluation: resize to img_size / crop_pct, centre crop
    crop_pct: float | None = by_recipe("crop_pct", "Evaluation centre crop fraction.", "data", range=FRACTION_RANGE)
    # at 1 every target is uniform: nothing is learnt (timm's smoothing loss asserts < 1)
    smoothing: float | None = by_recipe(
        "smoothing", "Label smoothing.", "augmentation", range=Range(0, 1, high_open=True)
    )
    # mixup's and cutmix's Beta(a, a) mixing weights are all near 0.5 well before a = 10
    mixup: float | None = by_recipe("mixup", "Mixup alpha; 0 turns it off.", "augmentation", range=(0, 10))
    cutmix: float | None = by_recipe("cutmix", "CutMix alpha; 0 turns it off.", "augmentation", range=(0, 10))
    mixup_prob: float = setting(
        1.0, "Share of batches mixed (timm Mixup's prob).", section="augmentation", range=FRACTION_RANGE
    )
    mixup_switch_prob: float = setting(
        0.5, "Share of mixed batches that use CutMix when both are on.", section="augmentation", range=FRACTION_RANGE
    )
    clip_grad: float | None = clip_grad_setting()
    skip_nonfinite: bool = skip_nonfinite_setting()
    amp: str = amp_setting()
    tf32: bool = tf32_setting()
    cudnn_benchmark: bool = cudnn_benchmark_setting()
    seed: int = setting(
        0, "Seeds the data order, the augmentation and the head.", section="optimisation", range=SEED_RANGE
    )
    workers: int = setting(2, "Data loader worker processes.", section="speed", range=WORKERS_RANGE)
    quiet: bool = setting(False, "No progress bars, no per-epoch lines.", section="logging")
    log_every: int | None = log_every_setting()
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", section="speed")
    max_steps_per_epoch: int | None = setting(
        None, "Cap the optimiser steps of each epoch.", section="optimisation", range=STEPS_RANGE
    )
    out: str = setting("runs/finetune", "Output folder.", section="output")
    # a fine-tuning checkpoint, or "auto" for OUT/checkpoint.pt
    resume: str | None = setting(
        None,
        "Continue from OUT/checkpoint.pt (saved after each epoch), or from the checkpoint given.",
        flag_value="auto",
        section="output",
    )
    force: bool = setting(
        False,
        "Start over in an --out that already holds a run: what the run wrote there is removed, your own files kept.",
        section="output",
    )

    def __post_init__(self):
        check_field_types(self)
        if self.checkpoint and self.from_scratch:
            raise ParameterError(
                "give either --checkpoint (fine-tune a pretrained backbone) or --from-scratch, not both "
                "(checkpoint= or from_scratch=True in Python)."
            )
        if not self.checkpoint and not self.from_scratch:
            raise ParameterError(
                "give --checkpoint CKPT (a `pretexts train` checkpoint; checkpoint= in Python) or --from-scratch "
                "--backbone NAME (from_scratch=True, backbone= in Python)."
            )
        if self.from_scratch and not self.backbone:
            raise ParameterError(
                "--from-scratch needs --backbone NAME (backbone= in Python), e.g. resnet18, convnext_atto, vit_tiny."
            )
        check_positions(self)
        check_global_pool(self)
        check_ranges(self)
        if self.batch_size % self.accum_iter:
            raise ParameterError(
                f"--accum-iter {self.accum_iter} must divide --batch-size {self.batch_size} into equal micro-batches."
            )
        check_amp(self)
        self.betas = tuple(self.betas)
        check_recipe_name(self.recipe)
        if self.recipe != "auto":  # `auto` is resolved by `Finetuner` once it has read the data
            apply_finetune_recipe(self)
            self.check_resolved()
        else:
            apply_agreed_values(self)
            self.check_linear_probe()
            if self.randaug is not None:
                self.check_randaug()

    @classmethod
    def from_dict(cls, values: dict) -> "FinetuneConfig":
        """A saved config (config.json, a checkpoint's); an unknown key is refused naming the close fields."""
        return from_values(cls, values)

    @classmethod
    def resuming(cls, out: str, **changes) -> "FinetuneConfig":
        """The config that continues the fine-tuning run in `out` from OUT/checkpoint.pt, as `pretexts finetune
        --resume` does: the checkpoint's saved settings with `changes` over them (`epochs=...` trains on). A change
        that would change the run is refused in one line.

        Raises:
            CheckpointError: There is no checkpoint to continue, or a change would change the run."""
        from pretexts.engine.training.resume_config import FINETUNE_MAY_CHANGE, resuming_config

        return resuming_config(cls, out, changes, "finetune", FINETUNE_MAY_CHANGE)

    def check_resolved(self, world: int | None = None) -> None:
        """The checks that need the recipe's values filled in; mixup/cutmix's on each of the `world` processes'
        share of the batch (under torchrun by default, WORLD_SIZE)."""
        check_optimizer(self)
        self.check_linear_probe()
        self.check_randaug()
        world = world or int(os.environ.get("WORLD_SIZE", "1"))
        fitting = self.batch_size + 2 * world - self.batch_size % (2 * world)  # the next batch that splits in pairs
        if self.mixing and self.batch_size % (2 * world):
            raise ParameterError(
                f"mixup/cutmix mix pairs of images and need an even batch size, got {self.batch_size}."
                if world == 1
                else f"mixup/cutmix mix pairs of images within each process's share of --batch-size "
                f"{self.batch_size}, which must be even: over {world} processes it is {self.batch_size / world:g}; "
                f"give --batch-size a multiple of {2 * world} (e.g. {fitting})."
            )

    def check_linear_probe(self) -> None:
        """--linear-probe and the linprobe recipe go together; the options that act on the trained backbone alone
        (layer-wise lr decay, drop path) or on AdamW (betas) would do nothing in a linear probe, so they are refused,
        not ignored."""
        if self.linear_probe and self.recipe not in ("auto", LINEAR_PROBE_RECIPE):
            raise ParameterError(
                f"--linear-probe takes the {LINEAR_PROBE_RECIPE} recipe (MAE's: LARS at base lr 0.1 for 90 epochs), "
                f"not {self.recipe!r}, whose values are for fine-tuning with AdamW; leave out --recipe, or give "
                f"--recipe {LINEAR_PROBE_RECIPE} (its options can still be changed one by one)."
            )
        if self.recipe == LINEAR_PROBE_RECIPE and not self.linear_probe:
            raise ParameterError(
                f"--recipe {LINEAR_PROBE_RECIPE} is MAE's linear probe: add --linear-probe (linear_probe=True in "
                f"Python), or fine-tune with --recipe paper, small or auto."
            )
        idle = [
            f"--{name.replace('_', '-')} {getattr(self, name):g}"
            for name, off in (("layer_decay", 1), ("drop_path", 0))
            if getattr(self, name) not in (None, off)
        ]
        if self.betas != ADAMW_BETAS:
            idle.append(f"--betas {self.betas[0]:g} {self.betas[1]:g}")
        if self.linear_probe and idle:
            raise ParameterError(
                f"--linear-probe trains the head alone with LARS on a frozen backbone in eval mode, so "
                f"{' and '.join(idle)} would do nothing; leave {'it' if len(idle) == 1 else 'them'} out."
            )

    def check_randaug(self) -> None:
        if self.randaug_policy:
            from timm.data.auto_augment import rand_augment_transform  # here: the CLI reads this module light

            try:
                rand_augment_transform(self.randaug_policy, {})
            except (AssertionError, ValueError, IndexError, KeyError):
                raise ParameterError(
                    f"randaug '{self.randaug}' is not a timm RandAugment policy; use e.g. "
                    f"rand-m9-mstd0.5-inc1-mmax9 (the paper recipe's), or none."
                ) from None

    @property
    def mixing(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0

    @property
    def randaug_policy(self) -> str | None:
        return None if str(self.randaug).lower() in RANDAUG_OFF else self.randaug

    @property
    def peak_lr(self) -> float:
        """lr = base_lr x batch / 256, the linear scaling rule (MAE, and the paper's Table A)."""
        return self.lr if self.lr is not None else self.base_lr * self.batch_size / 256

    def to_dict(self) -> dict:
        return asdict(self)
