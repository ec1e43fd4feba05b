"""The typed configuration of `pretexts probe`: frozen-feature evaluation of a pretraining checkpoint."""
from dataclasses import MISSING, dataclass

from pretexts.errors import ParameterError, suggest
from pretexts.registry import PROBES

from pretexts.engine.training.config import SEED_RANGE, check_field_types, check_optimizer, check_ranges, setting


@dataclass
class ProbeConfig:
    """Frozen backbone of `checkpoint`; heads train on cached features, so many epochs are cheap."""

    checkpoint: str = setting(MISSING, 'A checkpoint.pt written by `pretexts train` (required, here or in --config).')
    data: str = setting("sample", "'sample' (embedded, default) or a folder with train/ and val/ class folders.")
    probes: tuple = setting(("linear",), 'linear, mlp (3 layers, ReLU), knn or knn-std (kNN on standardised '
                                         'features); repeatable, features are extracted once. (In train, `--method` '
                                         'names the pretraining method.)',
                                         option='--probe', multiple=True)
    epochs: int = setting(100, 'Head training epochs on the cached features.')
    batch_size: int = setting(256, 'Batch of cached features.')
    lr: float = setting(1e-3, 'AdamW lr of the head.')
    weight_decay: float = setting(0.0, 'AdamW weight decay of the head.')
    # the paper's MLP head: three layers, 768 channels, ReLU (Appendix, Table B)
    hidden: int = setting(768, "Width of the MLP head's hidden layers (paper).")
    knn_k: tuple = setting((20, 200), 'Neighbours; repeatable.', multiple=True)
    # weights exp(sim / T), as lightly and solo-learn
    knn_temperature: float = setting(0.07, 'Votes weigh exp(cosine / T).')
    crop_pct: float = setting(0.875, 'Evaluation centre crop fraction.')
    seed: int = setting(0, 'Seeds the data order, the augmentation and the head.')
    workers: int = setting(2, 'Data loader worker processes.')
    device: str = setting("auto", 'auto, cpu, cuda, cuda:1, ...')
    out: str = setting("runs/probe", 'Output folder.')
    force: bool = setting(False, 'Replace the results of an earlier run in --out (its files are removed).')
    quiet: bool = setting(False, 'No progress bars (off anyway when the output is not a terminal).')

    def __post_init__(self):
        check_field_types(self)
        self.probes, self.knn_k = tuple(self.probes), tuple(int(k) for k in self.knn_k)
        PROBES.load()
        unknown = [m for m in self.probes if m not in PROBES.table]
        if unknown or not self.probes:
            raise ParameterError(f"unknown probe {', '.join(unknown) or '(none)'}; probes: {', '.join(PROBES.table)}."
                                 + (suggest(unknown[0], PROBES.table) if unknown else ""))
        if self.knn_k and min(self.knn_k) < 1:
            raise ParameterError(f"knn_k must be >= 1, got {min(self.knn_k)}.")
        check_ranges(self, positive=("epochs", "batch_size", "hidden", "knn_temperature"),
                     non_negative=("weight_decay", "workers"), fractions=("crop_pct",), within={"seed": SEED_RANGE})
        check_optimizer(self)
