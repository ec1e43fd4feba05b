"""The representation while it forms (`--monitor-every K`): on a fixed seeded held-out set of clean images,
label-free health (RankMe, the top principal component's share, the method's own scalars such as the energy's
correlation with brightness) and, where the data has labels, online kNN against a fixed set of training images."""

import sys
import time

import torch
from matplotlib.ticker import MaxNLocator

from pretexts.engine.data.labelled_data import match_val_classes
from pretexts.engine.data.loader import AugmentedImages, make_loader, to_device
from pretexts.engine.measures.health import knn_top1, label_free
from pretexts.engine.modules.eval_mode import eval_mode
from pretexts.engine.training.config import KEEP_BEST
from pretexts.engine.training.figures import new_figure
from pretexts.engine.training.file_writes import save_figure
from pretexts.errors import DataError

COLLAPSE_SHARE = 0.5  # above it one direction holds most of the variance: the warning fires


def match_monitor_labels(train_set, val_set, keep_best: str | None) -> str | None:
    """val/'s labels as train/ numbers its class folders of the same name (`match_val_classes`, probe's and
    finetune's rule): the kNN scores val images against a bank of training ones. A val/ class train/ lacks turns
    the kNN off, and the warning saying so is returned (pretraining needs no labels: folders such as train/2019 and
    val/2021 need not be classes, and the label-free measures go on); it is refused where --keep-best asks for the
    kNN."""
    try:
        match_val_classes(train_set, val_set)
    except DataError as error:
        if keep_best and keep_best.startswith("knn"):
            raise DataError(
                f"{error} --keep-best {keep_best} scores val/ by these labels; or keep the best by "
                f"rankme or top_pc_share."
            ) from None
        return f"warning: {error} The monitor's kNN is off for this run; its label-free measures go on."
    return None


def same_images(images: AugmentedImages, transform) -> AugmentedImages:
    """`images`' source under another transform (the kNN bank, the figure's first images), reporting through its
    WarnOnce: a file that fails to decode is warned about once in a run, however many of them read it."""
    view = AugmentedImages(images.source, transform, images.seed)
    view.warn = images.warn
    return view


def fixed_images(dataset, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` seeded images of `dataset` (uint8 on the host, loaded once) and their labels."""
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:count].tolist()
    images, labels = zip(*make_loader(dataset, max(1, min(64, count)), order, workers=0, drop_last=False))
    return torch.cat(images), torch.cat([torch.as_tensor(label) for label in labels])


class Monitor:
    """Measures `method.features` of the same images every time; `seconds` is what it cost."""

    def __init__(self, method, query_set, bank_set, images: int, seed: int, device: torch.device):
        self.method, self.device = method, device
        self.query, self.query_labels = fixed_images(query_set, images, seed)
        self.bank = fixed_images(bank_set, images, seed + 1) if bank_set is not None else None
        # labels that say something: more than one class on both sides (a flat folder's are all 0)
        self.labelled = self.bank is not None and len(self.query_labels.unique()) > 1 and len(self.bank[1].unique()) > 1
        self.seconds = 0.0
        self.warned = False
        self.history: list[dict] = []  # {"step": N, metric: value, ...}, kept in the checkpoint
        self.best: dict = {}  # metric -> best value so far

    def due(self, step: int, every: int, end_of_epoch: bool, last_epoch: bool) -> bool:
        """Every `every` steps, and at an epoch's end when the last measurement is half that old (or the run ends)."""
        last = self.history[-1]["step"] if self.history else 0
        return step % every == 0 or end_of_epoch and (last_epoch or step - last >= every // 2)

    def state(self) -> dict:
        return {"history": self.history, "best": self.best, "seconds": self.seconds}

    def load_state(self, state: dict | None) -> None:
        if state:
            self.history, self.best = list(state["history"]), dict(state["best"])
            self.seconds = state.get("seconds", 0.0)

    @torch.no_grad()
    def features(self, images: torch.Tensor) -> torch.Tensor:
        """`method.features` of uint8 host images, in chunks on the device, gathered on the host."""
        return torch.cat(
            [
                self.method.features(to_device(chunk, self.device)).float().flatten(1).cpu()
                for chunk in images.split(128)
            ]
        )

    def measure(self, step: int) -> dict:
        """The health numbers now, recorded in `history`; warns once on a collapse."""
        stats = self.measure_now()
        self.history.append({"step": step, **stats})
        self.warn_on_collapse()
        return stats

    def improved(self, metric: str) -> bool:
        """Whether the last measurement of `metric` is the best so far (it is then remembered)."""
        value = self.history[-1].get(metric)
        if value is None or not better(metric, value, self.best.get(metric)):
            return False
        self.best[metric] = value
        return True

    def summary(self, run_seconds: float) -> dict:
        """For results.json: the last measurement, the best ones, and what the monitor cost."""
        return {
            "last": self.history[-1] if self.history else None,
            "best": self.best,
            "measurements": len(self.history),
            "seconds": self.seconds,
            "share_of_run": self.seconds / run_seconds if run_seconds else None,
        }

    @torch.no_grad()
    def measure_now(self) -> dict:
        start = time.perf_counter()
        with eval_mode(self.method.model):
            features = self.features(self.query)
            images = to_device(self.query, torch.device("cpu"))  # the method's scalars read them on the host
            stats = {**label_free(features), **self.method.monitor_scalars(images, features)}
            if self.labelled:
                bank = self.features(self.bank[0])
                stats.update(knn_top1(bank, self.bank[1], features, self.query_labels))
        self.seconds += time.perf_counter() - start
        return stats

    def warn_on_collapse(self) -> None:
        """One line, once: what a dominant top component usually means. It must persist over the last two
        measurements: a fresh network passes through a short spike in its first steps."""
        recent = self.history[-2:]
        if len(recent) == 2 and all(row["top_pc_share"] > COLLAPSE_SHARE for row in recent) and not self.warned:
            self.warned = True
            step, share = recent[-1]["step"], recent[-1]["top_pc_share"]
            print(collapse_warning(self.method, step, share), file=sys.stderr, flush=True)


def collapse_warning(method, step: int, share: float) -> str:
    """The collapse warning, about the method and task that ran: what leaves the shortcut open, and the method's
    own advice for this task where it declares one (`Method.shortcut_advice`), else what the run can change."""
    cfg = method.cfg
    if method.uses_task:
        opener = f"task '{cfg.task}' leaves open to method '{cfg.method}'"
        neutral = "try another task (--task), other task arguments (--task-arg) or another method (--method)"
    else:
        opener = f"the corruption of method '{cfg.method}' leaves open (it ignores --task)"
        neutral = "try other method options (--method-arg) or another method (--method)"
    return (
        f"warning: at step {step} the top principal component holds {100 * share:.0f}% of the features' variance "
        f"(over {100 * COLLAPSE_SHARE:.0f}% twice in a row): the representation is collapsing onto one direction, "
        f"usually a shortcut that {opener}; {shortcut_advice(method) or neutral}; see OUT/monitor.png."
    )


def shortcut_advice(method) -> str | None:
    """The first of the method's `shortcut_advice` whose "ARG=VALUE" the run's task holds ("*": any run)."""
    for condition, advice in method.shortcut_advice.items():
        name, _, value = condition.partition("=")
        if condition == "*" or method.uses_task and value and str(getattr(method.task, name, None)) == value:
            return advice
    return None


def better(metric: str, value: float, best: float | None) -> bool:
    return best is None or (value > best if KEEP_BEST[metric] else value < best)


# a method scalar's panel title where its log key is not words enough; others get the key with spaces
SCALAR_TITLES = {"energy_brightness_corr": "energy's correlation with brightness"}


def monitor_figure(history: list[dict], path, title: str) -> None:
    """One panel per measured quantity against the optimiser step (integer ticks), the collapse threshold named."""
    names = [k for k in history[0] if k != "step"]
    panels = [
        ("rankme", "effective rank (RankMe)"),
        ("top_pc_share", "top component's share of variance"),
        ("knn", "online kNN top-1 (%)"),
    ] + [
        (k, SCALAR_TITLES.get(k, k.replace("_", " ")))
        for k in names
        if k not in ("rankme", "top_pc_share") and not k.startswith("knn")
    ]
    panels = [(k, label) for k, label in panels if k == "knn" and any(n.startswith("knn") for n in names) or k in names]
    fig = new_figure(figsize=(3.4 * len(panels), 3))
    axes = fig.subplots(1, len(panels), squeeze=False)
    steps = [row["step"] for row in history]
    for ax, (key, label) in zip(axes[0], panels):
        for name in [n for n in names if n.startswith("knn")] if key == "knn" else [key]:
            ax.plot(steps, [row.get(name, float("nan")) for row in history], marker=".", label=name.replace("knn_", ""))
        if key == "top_pc_share":
            warning = f"collapse warning ({COLLAPSE_SHARE:.0%})"
            ax.legend(handles=[ax.axhline(COLLAPSE_SHARE, color="gray", lw=0.8, ls="--", label=warning)], fontsize=8)
        if key == "knn":
            ax.legend(fontsize=8, loc="best", framealpha=0.7)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("optimiser step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
