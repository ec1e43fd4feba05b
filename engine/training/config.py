"""The typed configuration of a pretraining run. Optimiser defaults come from a named recipe
(engine/training/recipes.py): `recipe="paper"` gives the optimiser of the paper's Appendix A, Table A."""

from dataclasses import asdict, dataclass, field, fields

from pretexts.engine.training.experiment_log import check_logger
from pretexts.engine.training.recipes import apply_recipe
from pretexts.engine.training.settings import (
    BATCH_RANGE,
    BETAS_RANGE,
    COMPILE_AUTO,
    COMPILE_OFF,
    EPOCHS_RANGE,
    EVERY_EPOCHS_RANGE,
    EVERY_STEPS_RANGE,
    IMAGES_RANGE,
    IMG_SIZE_RANGE,
    LR_RANGE,
    MIN_LR_RANGE,
    POOLS,
    SEED_RANGE,
    STEPS_RANGE,
    WARMUP_EPOCHS_RANGE,
    WEIGHT_DECAY_RANGE,
    WORKERS_RANGE,
    amp_setting,
    check_amp,
    check_field_types,
    check_global_pool,
    check_optimizer,
    check_ranges,
    clip_grad_setting,
    cudnn_benchmark_setting,
    from_values,
    log_every_setting,
    save_every_setting,
    setting,
    skip_nonfinite_setting,
    tf32_setting,
)
from pretexts.errors import ParameterError, UnknownNameError
from pretexts.registry import METHODS

# the monitored metrics --keep-best takes, and whether higher is better (engine/training/monitor.py)
KEEP_BEST = {"knn_cosine": True, "knn_standardised": True, "rankme": True, "top_pc_share": False}


@dataclass
class PretrainConfig:
    """Everything `engine.pretrain` needs; the CLI builds one of these, so does the Python API.

    The recipe fills the fields left at None when the config is built. To change the recipe, build a new config:
    `dataclasses.replace(cfg, recipe="fast")` copies the old recipe's values as if given, and setting `cfg.recipe`
    afterwards is refused when the run starts."""

    # "energy" (the paper), "ae", "mae", or a plugin's (engine.methods)
    method: str = setting(
        "energy",
        "energy (the paper's), ae (autoencoder), mae (plain ViTs only), simmim (ViT, Swin, ConvNeXt, ResNet) or "
        "a plugin's (`pretexts list --methods`; `list --backbones`: which suits which backbone).",
        section="model",
    )
    # the demo's: its restoration shows within 200 CPU steps (docs/results/learning-speed.md)
    task: str = setting("random-mask", "Pretext task (see `pretexts list`).", section="model")
    task_args: dict = field(default_factory=dict)
    # the method's own options (the energy method's steps, alpha, grad_mode, ...; MAE's mask_ratio), checked and
    # given their defaults by the method (`Method.parse_args`); each is also its own `pretexts train` option
    method_args: dict = field(default_factory=dict)
    # LayerNorm, 3.7 M params: learns within minutes on a CPU
    backbone: str = setting(
        "convnext_atto", "Alias (vit_tiny, vit_small, swin_t, resnet18, ...) or timm name.", section="model"
    )
    global_pool: str | None = setting(
        None,
        "The backbone's pooling (timm's global_pool): avg (the patch tokens' mean), or token (ViTs' class token); "
        "default: the backbone's own (token on ViTs, avg on CNNs). Fine-tuning, probes and export take the "
        "checkpoint's.",
        choices=POOLS,
        section="model",
    )
    data: str = setting(
        "sample",
        "'sample' (320 embedded CIFAR-10 images), 'synthetic', a folder (train/ and val/ class folders, class "
        "folders alone or loose images: 5 % is held out as val), shards (a `pretexts shard` folder, .tar or .parquet "
        "files) or a CIFAR-10 folder.",
        section="data",
    )
    dataset: str | None = setting(
        None,
        "A timm create_dataset name (torch/cifar100, torch/mnist, hfds/NAME) whose "
        "files lie in --data; nothing is downloaded.",
        section="data",
    )
    img_size: int = setting(32, "Training resolution.", section="data", range=IMG_SIZE_RANGE)
    epochs: int = setting(
        40,
        "Passes over the training images (40: 200 optimiser steps of batch 64 on the 320 embedded images, a few "
        "minutes on a laptop CPU).",
        section="optimisation",
        range=EPOCHS_RANGE,
    )
    # global batch (split across ranks under torchrun)
    batch_size: int = setting(64, "Global batch size.", section="optimisation", range=BATCH_RANGE)
    accum_iter: int = setting(
        1,
        "Gradient accumulation: run each step's batch as this many micro-batches (the memory"
        " of batch / K images, the step of the whole batch).",
        section="speed",
        range=BATCH_RANGE,
    )
    # fills the None fields below: "paper" (Table A), "fast" or "simmim" (engine/training/recipes.py)
    recipe: str = setting(
        "fast",
        "Optimiser defaults: 'fast' (base lr 1e-3, alpha lr x400), 'paper' "
        "(Table A's optimiser: base lr 1e-4, alpha lr x1) or 'simmim' (SimMIM's official "
        "pretraining: base lr 5e-5, betas 0.9 0.999, clip 5). Explicit options win.",
        section="optimisation",
    )
    lr: float | None = setting(
        None, "Peak lr. Default base lr x batch / 256 (paper).", section="optimisation", range=LR_RANGE
    )
    # None: the recipe's (paper, Table A: 1e-4; fast: 1e-3)
    base_lr: float | None = setting(
        None, "lr per 256 images. Default: the recipe's.", section="optimisation", range=LR_RANGE
    )
    min_lr: float = setting(0.0, "End of the cosine decay.", section="optimisation", range=MIN_LR_RANGE)
    schedule: str | None = setting(
        None,
        "After the warm-up: cosine (decay to --min-lr), constant, or auto: cosine for the energy method on a ViT "
        "planned past 200 steps, else constant. Default: the recipe's (fast: auto).",
        section="optimisation",
    )
    warmup_epochs: float = setting(
        1.0, "Linear warm-up from 0 to the peak lr.", section="optimisation", range=WARMUP_EPOCHS_RANGE
    )
    # None: the recipe's (both: 0.05, Table A)
    weight_decay: float | None = setting(
        None,
        "AdamW's (norms, biases and alpha get none). Default: the recipe's.",
        section="optimisation",
        range=WEIGHT_DECAY_RANGE,
    )
    # None: the recipe's (both: 0.9, 0.95, Table A)
    betas: tuple | None = setting(
        None,
        "AdamW's betas. Default: the recipe's.",
        metavar="B1 B2",
        nargs=2,
        section="optimisation",
        range=BETAS_RANGE,
    )
    amp: str = amp_setting(
        '"bf16" (on a CPU too: the same held-out error; faster on larger steps where the CPU has native bf16, '
        "docs/results/cpu-speed.md)"
    )
    compile: str | None = setting(
        "auto",
        "torch.compile (alone: backend inductor; off: eager): the energy method's restoration step (both grad "
        "modes, exact gradients; eager on BatchNorm backbones), other methods' backbone; what does not compile runs "
        "eagerly. auto: compiled where measured faster and the run repays the compile time (the energy method's "
        "exact step on a ViT, on the CPU, from about 350 steps of 64 images at 32 px), eager elsewhere; the start "
        "line says which.",
        flag_value="inductor",
        metavar="[BACKEND]",
        section="speed",
    )
    grad_checkpointing: bool = setting(
        False,
        "Recompute activations in the backward (non-reentrant): less memory, more time; off on BatchNorm backbones, "
        "whose running statistics the recomputation would update again.",
        section="speed",
    )
    channels_last: bool = setting(False, "NHWC memory format (convolutional backbones).", section="speed")
    tf32: bool = tf32_setting()
    cudnn_benchmark: bool = cudnn_benchmark_setting()
    clip_grad: float | None = clip_grad_setting()
    seed: int = setting(
        0, "Seeds the crops, the corruptions and the initialisation.", section="optimisation", range=SEED_RANGE
    )
    out: str = setting("runs/pretrain", "Output folder.", section="output")
    # a checkpoint path, or "auto" for OUT/checkpoint.pt
    resume: str | None = setting(
        None, "Continue from OUT/checkpoint.pt, or from the checkpoint given.", flag_value="auto", section="output"
    )
    force: bool = setting(
        False,
        "Start over in an --out that already holds a run: what the run wrote there is removed, your own files kept.",
        section="output",
    )
    save_every: int | None = save_every_setting("OUT/checkpoint.pt")
    workers: int = setting(2, "Data loader worker processes.", section="speed", range=WORKERS_RANGE)
    quiet: bool = setting(False, "No progress bars on a terminal, no progress lines off one.", section="logging")
    # off a terminal (nohup, a cluster job) the loop prints one line per epoch on stderr; these add step lines
    log_every: int | None = log_every_setting()
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", section="speed")
    max_steps_per_epoch: int | None = setting(
        None, "Cap the optimiser steps of each epoch.", section="optimisation", range=STEPS_RANGE
    )
    # rows of one figure: more are unreadable, and each is restored at every figure
    figure_images: int = setting(8, "Images in each epoch's restoration figure.", section="output", range=(1, 64))
    figure_every: int = setting(
        1,
        "Draw the restoration figure (and monitor.png, and the logger's image) every "
        "this many epochs and at the last; 0: at the last epoch only.",
        section="output",
        range=EVERY_EPOCHS_RANGE,
    )
    eval_images: int = setting(
        256, "Held-out images for the restoration-error report.", section="logging", range=IMAGES_RANGE
    )
    eval_every: int | None = setting(
        None, "Also log the held-out error every this many steps.", section="logging", range=STEPS_RANGE
    )
    logger: str = setting(
        "jsonl",
        "Also log scalars, held-out error and figures to tensorboard (OUT/tensorboard) or "
        "wandb (offline unless WANDB_MODE=online); jsonl: log.jsonl alone (always written).",
        section="logging",
    )
    skip_nonfinite: bool = skip_nonfinite_setting()
    # about 1 % of the default run's time (docs/monitoring.md)
    monitor_every: int = setting(
        50,
        "Measure the representation every this many steps and at the end (RankMe, top "
        "component's share, online kNN where there are labels; monitor.png); 0: off.",
        section="logging",
        range=EVERY_STEPS_RANGE,
    )
    monitor_images: int = setting(
        256,
        "Held-out images (and as many training images for kNN) the monitor measures.",
        section="logging",
        range=IMAGES_RANGE,
    )
    keep_best: str | None = setting(
        None,
        "Also keep OUT/best.pt, the checkpoint with the best monitored metric.",
        choices=tuple(KEEP_BEST),
        section="output",
    )

    def __post_init__(self):
        check_field_types(self)
        apply_recipe(self)
        check_ranges(self)
        check_optimizer(self)
        check_amp(self)
        check_global_pool(self)
        if isinstance(self.compile, str) and self.compile.lower() in COMPILE_OFF:
            self.compile = None
        if self.compile not in (None, COMPILE_AUTO):  # torch's list of backends, loaded only when one is asked for
            from pretexts.engine.training.preflight import check_compile_backend

            check_compile_backend(self.compile)
        check_logger(self.logger)
        if self.keep_best is not None and not self.monitor_every:
            raise ParameterError(f"keep_best {self.keep_best} needs the monitor; give --monitor-every N (N > 0).")
        if self.keep_best not in (None, *KEEP_BEST):
            raise ParameterError(f"keep_best must be one of {', '.join(KEEP_BEST)}; got {self.keep_best!r}.")
        self.betas = tuple(self.betas)

    @property
    def peak_lr(self) -> float:
        """lr = base_lr x batch / 256, the linear scaling rule the paper follows from MAE."""
        return self.lr if self.lr is not None else self.base_lr * self.batch_size / 256

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "PretrainConfig":
        """A saved config (config.json, a checkpoint's); a key of the method's options goes into method_args,
        as a config file's does; any other unknown key is refused naming the close fields."""
        return from_values(cls, with_method_args(dict(values)))

    @classmethod
    def resuming(cls, out: str, **changes) -> "PretrainConfig":
        """The config that continues the run in `out` from OUT/checkpoint.pt, as `pretexts train --resume` does:
        the checkpoint's saved settings with `changes` over them. A change that would change the run (the task, the
        backbone, the seed, the batch size, the lr, ...) is refused in one line; what may change is how long and how
        the run goes on (`epochs`, `workers`, `device`, logging, figures, `compile`). `resume=PATH` continues the
        checkpoint PATH into `out` instead.

        Raises:
            CheckpointError: There is no checkpoint to continue, or a change would change the run."""
        from pretexts.engine.training.resume_config import PRETRAIN_MAY_CHANGE, resuming_config

        return resuming_config(cls, out, changes, "pretrain", PRETRAIN_MAY_CHANGE)


def method_attribute(method: str, name: str, empty):
    """The class attribute `name` of `method` (its `method_params`); `empty` for a method that
    is not installed, whose run then says so. Imports the method's module (and torch) on first use."""
    try:
        return getattr(METHODS.get(method), name)
    except UnknownNameError:
        return empty


def method_param_names(method: str) -> tuple[str, ...]:
    """The names of the options `method` declares (its `method_params`)."""
    return tuple(method_attribute(method, "method_params", {}))


def with_method_args(values: dict) -> dict:
    """`values` with the top-level keys that are no config field but an option of its method (`--set steps=1`)
    moved into 'method_args', over what it held."""
    known = {f.name for f in fields(PretrainConfig)}
    loose = [k for k in values if k not in known]
    if not loose:
        return values
    declared = set(method_param_names(values.get("method", PretrainConfig.method)))
    moved = {k: values[k] for k in loose if k in declared}
    rest = {k: v for k, v in values.items() if k not in moved}
    return {**rest, "method_args": {**(values.get("method_args") or {}), **moved}} if moved else rest
