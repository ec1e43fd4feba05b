"""The typed configuration of `pretexts probe`: frozen-feature evaluation of a pretraining checkpoint, and the
parameters the built-in probes declare.

The built-in probes' `params` are declared here rather than beside them in probe.py, which imports torch: the
CLI builds an option for each (`--epochs`, `--knn-k`, ...) without importing it."""

from dataclasses import dataclass, field

from pretexts.engine.training.settings import (
    FRACTION_RANGE,
    IMG_SIZE_RANGE,
    SEED_RANGE,
    WORKERS_RANGE,
    check_field_types,
    check_positions,
    check_ranges,
    max_images_setting,
    positions_setting,
    setting,
)
from pretexts.errors import ParameterError, suggest
from pretexts.params import Param
from pretexts.registry import PROBES


@dataclass(frozen=True)
class WholeNumbers(Param):
    """A list of whole numbers, each in [low, high]: 'a,b' from `--probe-arg`, a list from a config file."""

    kind: type = int

    def describe(self) -> str:
        return f"list of int in [{self.low}, {self.high}], default {', '.join(map(str, self.default))}"

    def convert(self, owner: str, name: str, value) -> tuple:
        items = value.split(",") if isinstance(value, str) else [value] if isinstance(value, int) else value
        if not isinstance(items, (list, tuple)) or not items:
            raise ParameterError(
                f"{owner}: parameter '{name}' must be a non-empty list of whole numbers, got {value!r}."
            )
        one = Param(self.default[0], int, self.low, self.high)
        return tuple(one.convert(owner, name, item.strip() if isinstance(item, str) else item) for item in items)


# a head trained on the cached features (linear, mlp): AdamW with cosine decay, so many epochs are cheap
HEAD_PARAMS = {
    "epochs": Param(100, int, 1, 1_000_000, help="head training epochs on the cached features"),
    "batch_size": Param(256, int, 1, 1 << 24, help="batch of cached features"),
    "lr": Param(1e-3, float, 1e-12, 1.0, help="AdamW lr of the head (a larger step diverges)"),
    "weight_decay": Param(0.0, float, 0.0, 100.0, help="AdamW weight decay of the head"),
}
# the paper's MLP head: three layers, 768 channels, ReLU (Appendix, Table B)
MLP_PARAMS = {**HEAD_PARAMS, "hidden": Param(768, int, 1, 1 << 16, help="width of the MLP head's hidden layers")}
# votes weigh exp(cosine / T), as lightly and solo-learn
KNN_PARAMS = {
    "knn_k": WholeNumbers((20, 200), int, 1, 1 << 24, help="neighbours, one result each"),
    "knn_temperature": Param(0.07, float, 1e-6, 1e6, help="votes weigh exp(cosine / T)"),
}
# each built-in probe option once, in this order, for the CLI's flags (`--epochs`, ..., `--knn-temperature`)
BUILTIN_PROBE_PARAMS = {**MLP_PARAMS, **KNN_PARAMS}


def params_of(probe) -> dict:
    """The parameters a registered probe declares (`params`, name -> Param); none for one that declares none."""
    return getattr(probe, "params", None) or {}


@dataclass
class ProbeConfig:
    """A frozen backbone; the probes run on its features, extracted once. The backbone is `checkpoint` (a
    pretraining checkpoint, or a folder or weights file of `pretexts export`), timm model `timm_model` (weights
    from `checkpoint`, else from disk; nothing is downloaded), or `backbone` at random init (`from_scratch`, the
    baseline). `data` left out is the data the weights were trained on, where recorded, else the embedded sample."""

    checkpoint: str | None = setting(
        None,
        "A checkpoint.pt written by `pretexts train`, or a folder or "
        ".safetensors written by `pretexts export`; with --timm-model, its "
        "weights file.",
        section="model",
    )
    timm_model: str | None = setting(
        None,
        "A timm model with its pretrained weights, read from disk (the Hugging "
        "Face or torch hub cache, or --checkpoint FILE; nothing is downloaded), "
        "or local-dir:FOLDER.",
        section="model",
    )
    from_scratch: bool = setting(
        False, "Probe --backbone at random init, seeded by --seed (the baseline).", section="model"
    )
    backbone: str | None = setting(
        None, "With --from-scratch: alias (resnet18, vit_tiny, ...) or timm name.", section="model"
    )
    positions: str = positions_setting()
    block: int | None = setting(
        None,
        "Probe the output of block K (1 = the first; a ViT's blocks, a CNN's stages) averaged over positions, "
        "instead of the backbone's pooled features: how the features build up with depth. Default: the pooled "
        "features.",
        section="model",
        range=(1, 1000),
    )
    img_size: int | None = setting(
        None, "With --from-scratch. Default 32; the weights' own otherwise.", section="data", range=IMG_SIZE_RANGE
    )
    data: str | None = setting(
        None,
        "A folder with train/ and val/ class folders (class folders alone: 5 % of each class is held out as val, "
        "the same whatever --seed), labelled shards (`pretexts shard`; WebDataset .tar or parquet), or 'sample' "
        "(embedded). Default: the data the checkpoint was trained on, else the sample.",
        section="data",
    )
    max_images: int = max_images_setting()
    probes: tuple = setting(
        ("linear",),
        "linear, mlp (3 layers, ReLU), knn or knn-std (kNN on standardised "
        "features), or a plugin's (`pretexts list --probes`); repeatable, features "
        "are extracted once. (In train, `--method` names the pretraining method.)",
        option="--probe",
        multiple=True,
        section="probes",
    )
    # the probes' own options (`--probe-arg KEY=VALUE` and the built-ins' flags), each checked by the probes
    # that declare it; a key no probe declares is refused
    probe_args: dict = field(default_factory=dict)
    crop_pct: float = setting(0.875, "Evaluation centre crop fraction.", section="data", range=FRACTION_RANGE)
    seed: int = setting(
        0, "Seeds the heads, and the random backbone of --from-scratch.", section="probes", range=SEED_RANGE
    )
    workers: int = setting(2, "Data loader worker processes.", section="speed", range=WORKERS_RANGE)
    device: str = setting("auto", "auto, cpu, cuda, cuda:1, ...", section="speed")
    out: str = setting("runs/probe", "Output folder.", section="output")
    force: bool = setting(
        False,
        "Start over in an --out that already holds a run: what the run wrote there is removed, your own files kept.",
        section="output",
    )
    quiet: bool = setting(False, "No progress bars (off anyway when the output is not a terminal).", section="logging")

    def __post_init__(self):
        check_field_types(self)
        check_probe_source(self)
        self.probes, self.probe_args = tuple(self.probes), dict(self.probe_args)
        if not self.probes:
            raise ParameterError(f"give at least one probe (--probe NAME; probes=(NAME,) in Python): {probe_names()}.")
        for name in self.probes:
            PROBES.get(name)  # an unknown name: UnknownNameError with close names, as for tasks and methods
        check_ranges(self)
        check_probe_args(self.probe_args, self.probes)

    def probe_params(self, name: str) -> dict:
        """The values of every parameter probe `name` declares: `probe_args`' converted, else the default."""
        return {
            key: param.convert(f"probe {name}", key, self.probe_args.get(key, param.default))
            for key, param in params_of(PROBES.get(name)).items()
        }


def check_probe_source(cfg: ProbeConfig) -> None:
    """Exactly one backbone: a checkpoint or export, a timm model, or --from-scratch with --backbone."""
    check_positions(cfg)
    if cfg.from_scratch:
        if cfg.checkpoint or cfg.timm_model:
            raise ParameterError(
                "--from-scratch probes a random backbone; leave out --checkpoint and --timm-model (checkpoint= and "
                "timm_model= in Python)."
            )
        if not cfg.backbone:
            raise ParameterError(
                "--from-scratch needs --backbone NAME (backbone= in Python), e.g. resnet18, convnext_atto, vit_tiny."
            )
    elif not cfg.checkpoint and not cfg.timm_model:
        raise ParameterError(
            "give --checkpoint CKPT (of `pretexts train`, or an export), --timm-model NAME, or "
            "--from-scratch --backbone NAME (in Python: checkpoint=, timm_model=, or from_scratch=True with backbone=)."
        )
    elif cfg.backbone or cfg.img_size:
        raise ParameterError(
            f"--{'backbone' if cfg.backbone else 'img-size'} goes with --from-scratch (in Python, "
            f"{'backbone' if cfg.backbone else 'img_size'}= goes with from_scratch=True); the weights probed have "
            f"their own."
        )


def declared_probe_params() -> dict[str, list]:
    """Parameter name -> (probe name, Param) of every registered probe that declares it."""
    PROBES.load()
    declared: dict[str, list] = {}
    for name, probe in PROBES.table.items():
        for key, param in params_of(probe).items():
            declared.setdefault(key, []).append((name, param))
    return declared


def probe_names() -> str:
    """The registered probes, for a message."""
    PROBES.load()
    return ", ".join(PROBES.table)


def check_probe_args(args: dict, probes: tuple = ()) -> None:
    """ParameterError for a key no registered probe declares, a value one that declares it refuses (a bad value is
    refused before the features are extracted), or a key none of `probes` (those run) reads: never silently unused."""
    declared = declared_probe_params()
    for key, value in args.items():
        if key not in declared:
            raise ParameterError(
                f"no probe has a parameter '{key}'.{suggest(key, declared)} Parameters: "
                f"{', '.join(declared) or 'none'} (`pretexts list --probes -v`)."
            )
        for name, param in declared[key]:
            param.convert(f"probe {name}", key, value)
        readers = [name for name, _ in declared[key]]
        if probes and not set(readers) & set(probes):
            option = f"--{key.replace('_', '-')}" if key in BUILTIN_PROBE_PARAMS else f"--probe-arg {key}=..."
            raise ParameterError(
                f"{option} is read by probe {' or '.join(readers)}, which this run does not select (it runs "
                f"{', '.join(probes)}): add --probe {readers[0]} (probes={(*probes, readers[0])!r} in Python), "
                f"or leave it out."
            )


def with_probe_args(values: dict) -> dict:
    """`values` with the top-level keys that are no config field but a probe's parameter (`--set epochs=10`) moved
    into 'probe_args', over what it held."""
    known = set(ProbeConfig.__dataclass_fields__)
    declared = declared_probe_params()
    moved = {k: v for k, v in values.items() if k not in known and k in declared}
    if not moved:
        return values
    rest = {k: v for k, v in values.items() if k not in moved}
    return {**rest, "probe_args": {**(values.get("probe_args") or {}), **moved}}
