"""The typed configuration of `pretexts compare`: which pretexts and methods to pretrain on one's data, for how
long, and how to score the features they leave."""

from dataclasses import dataclass

from pretexts.engine.training.settings import (
    BATCH_RANGE,
    EPOCHS_RANGE,
    IMG_SIZE_RANGE,
    SEED_RANGE,
    Range,
    check_field_types,
    check_ranges,
    max_images_setting,
    save_every_setting,
    setting,
)
from pretexts.errors import ParameterError, suggest
from pretexts.registry import METHODS, TASKS

SCORES = ("linear", "knn", "knn_std", "finetune")  # what --rank-by may name, as the table's columns call them
DEFAULT_BUDGET = (2.0,)  # minutes


@dataclass
class CompareConfig:
    """One study: every (task, method) pair pretrained for each budget, each seed, plus a random-init row."""

    tasks: tuple = setting(
        ("random-mask",),
        "Pretext tasks to try (several, space-separated: --tasks random-mask colorization; any registered, plugins "
        "included). Methods that mask on their own (mae, simmim) ignore them.",
        multiple=True,
        option="--tasks",
        section="model",
    )
    methods: tuple = setting(
        ("energy",),
        "Methods to try (several, space-separated: --methods energy ae; `pretexts list --methods`).",
        multiple=True,
        option="--methods",
        section="model",
    )
    backbone: str = setting("convnext_atto", "Alias or timm name, the same for every pair.", section="model")
    data: str = setting(
        "sample",
        "A labelled folder with train/ and val/ class folders (class folders alone: 5 % of each class is held out as "
        "val, the same whatever --seed), labelled shards (`pretexts shard`; pretraining streams them), or 'sample'; "
        "kNN, the linear probe and fine-tuning score on val.",
        section="data",
    )
    max_images: int = max_images_setting()
    # minutes per pair: a week is past any study's
    budget: tuple = setting(
        DEFAULT_BUDGET,
        "Pretraining minutes per pair (several, space-separated: --budget 2 5; each budget is scored from a "
        "snapshot of one run). CPU minutes of the training steps on a CPU, wall-clock "
        "on a GPU (--clock); --steps replaces them.",
        multiple=True,
        option="--budget",
        section="optimisation",
        range=Range(0, 10_080, low_open=True),
    )
    # ten million steps: past any pretraining schedule (ImageNet's 1,600 MAE epochs at batch 4096 are 0.5M)
    steps: tuple = setting(
        (),
        "Pretraining steps per pair instead of minutes (several, space-separated: --steps 100 250; each scored "
        "from a snapshot of one run): every "
        "method gets as many optimizer steps whatever one costs, as papers compare per epoch; the table still "
        "gives the minutes each took (--clock).",
        multiple=True,
        option="--steps",
        metavar="N",
        section="optimisation",
        range=Range(1, 10_000_000),
    )
    clock: str = setting(
        "auto",
        "auto: process CPU time on a CPU (fair when other work shares it), wall-clock on a GPU; or process, wall.",
        choices=("auto", "process", "wall"),
        section="optimisation",
    )
    seeds: tuple = setting(
        (0,),
        "Seeds (several, space-separated: --seeds 0 1 2); the table gives mean +- std over them.",
        multiple=True,
        option="--seeds",
        section="optimisation",
        range=SEED_RANGE,
    )
    finetune_epochs: int = setting(
        0,
        "Also fine-tune each pair's last snapshot for this many epochs (0: no).",
        section="scoring",
        range=Range(0, EPOCHS_RANGE.high),
    )
    finetune_amp: str = setting(
        "auto",
        'The fine-tunes\' precision: "auto" (bf16 on CUDA, fp32 on CPU), "bf16" (1.3x faster than fp32 on a CPU '
        'with native bf16, measured on vit_tiny), "off" (fp32). Every pair gets the same.',
        choices=("auto", "bf16", "off"),
        section="scoring",
    )
    rank_by: str = setting("linear", "The score the table and plot rank by.", choices=SCORES, section="scoring")
    img_size: int = setting(32, "Training resolution.", section="data", range=IMG_SIZE_RANGE)
    batch_size: int = setting(64, "Pretraining batch size.", section="optimisation", range=BATCH_RANGE)
    # more threads than cores only contend; 1024 is past any machine's hardware threads
    threads: int = setting(0, "Torch threads per pair (0: torch's default).", section="speed", range=(0, 1024))
    # the CPU clock counts the training process only: in-process loading keeps CPU budgets fair; a GPU needs workers
    workers: int = setting(
        0,
        "Loader worker processes of each pair's pretraining (0: load in the training process, whose CPU time the "
        "budget counts; on a GPU use several, or loading sets the pace).",
        section="speed",
        range=(0, 64),
    )
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", section="speed")
    out: str = setting(
        "runs/compare",
        "Output folder: the table, the plot, and each pair's cached cell (a rerun "
        "of the same command resumes; --force starts over).",
        section="output",
    )
    force: bool = setting(
        False, "Start over in an --out that holds another comparison (its cells are removed).", section="output"
    )
    save_every: int | None = save_every_setting("each pretraining run's checkpoint")
    quiet: bool = setting(False, "Only the table at the end.", section="logging")

    def __post_init__(self):
        check_field_types(self)
        # a name given twice would plan two cells of one folder and show one row: each is kept once, and said so
        self.notes = []  # not a field: what compare() says before the plan
        self.tasks = self.once("--tasks", split_names(self.tasks), "compared")
        self.methods = self.once("--methods", split_names(self.methods), "compared")
        self.seeds = self.once("--seeds", tuple(int(s) for s in split_names(self.seeds)), "run")
        self.budget = tuple(sorted(self.once("--budget", tuple(float(b) for b in split_names(self.budget)), "scored")))
        self.steps = tuple(
            sorted(self.once("--steps", tuple(whole_steps(s) for s in split_names(self.steps)), "scored"))
        )
        check_ranges(self)
        if self.steps and self.budget not in (DEFAULT_BUDGET, ()):
            raise ParameterError(
                f"give the budget in minutes (--budget {' '.join(f'{b:g}' for b in self.budget)}) or in steps "
                f"(--steps {' '.join(map(str, self.steps))}), not both."
            )
        if self.steps:
            self.budget = ()  # the record says what ran: steps
        elif not self.budget:
            raise ParameterError("budget must be minutes > 0 (--budget) or steps >= 1 (--steps), got none.")
        if not (self.tasks and self.methods and self.seeds):
            raise ParameterError("compare needs at least one task, one method and one seed.")
        check_names("method", self.methods, METHODS)
        check_names("pretext task", self.tasks, TASKS)
        if self.rank_by == "finetune" and not self.finetune_epochs:
            raise ParameterError("--rank-by finetune needs --finetune-epochs N (N > 0).")

    def once(self, option: str, values: tuple, verb: str) -> tuple:
        """`values` with each kept once, in the order given; a note in `notes` for each repeated one."""
        for value in dict.fromkeys(values):
            times = values.count(value)
            if times > 1:
                given = "twice" if times == 2 else f"{times} times"
                shown = f"{value:g}" if isinstance(value, float) else value
                self.notes.append(f"note: {shown} given {given} in {option}: {verb} once")
        return tuple(dict.fromkeys(values))

    @property
    def budgets(self) -> tuple:
        """Where each pair is snapshotted and scored: --steps if given, else --budget's minutes."""
        return self.steps or self.budget

    @property
    def unit(self) -> str:
        """What `budgets` count: 'steps' or 'minutes'."""
        return "steps" if self.steps else "minutes"


def whole_steps(value) -> int | float:
    """A step count: a whole number is an int (12, 12.0, '12'), anything else is left for the checks to refuse."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"steps must be whole numbers >= 1, got {value!r}.") from None
    if not number.is_integer():
        raise ParameterError(f"steps must be whole numbers >= 1, got {value!r}.")
    return int(number)


def split_names(values) -> tuple:
    """('a,b', 'c') -> ('a', 'b', 'c'): a list option takes repeats, commas or both."""
    items = values if isinstance(values, (tuple, list)) else (values,)
    return tuple(
        part.strip() if isinstance(part, str) else part
        for item in items
        for part in (str(item).split(",") if isinstance(item, str) else (item,))
        if not isinstance(part, str) or part.strip()
    )


def check_names(kind: str, names: tuple, registry) -> None:
    registry.load()
    for name in names:
        if name not in registry.table:
            raise ParameterError(
                f"unknown {kind} '{name}'.{suggest(name, registry.table)} Known: {', '.join(registry.table)}."
            )
