"""What a top-1 score is measured against: the chance level of the validation labels and the spread their number
allows (a Wilson 95 % interval), written beside every probe and fine-tune score.

Pure arithmetic on counts, no torch: `pretexts probe`, `pretexts finetune` and their results.json share it."""

import math
import shlex
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile: a two-sided 95 % interval


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion `successes / n` (Wilson 1927; Newcombe 1998, method 3),
    as fractions in [0, 1]. Unlike the normal approximation it stays inside [0, 1] and is not zero-width at 0 or n
    correct. (0.0, 1.0) when `n` is 0: nothing was measured."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def percent_interval(top1: float, n: int) -> tuple[float, float]:
    """The Wilson 95 % interval, in percent, of a top-1 in percent measured on `n` images."""
    low, high = wilson_interval(round(top1 * n / 100), n)
    return 100 * low, 100 * high


@dataclass(frozen=True)
class Chance:
    """The top-1 a guess without the image gets: 1 / classes when every class has as many validation images, else
    the majority class's share of them (always answering it)."""

    percent: float
    rule: str  # "1/classes" or "majority class"

    def describe(self) -> str:
        return f"chance {self.percent:.1f}%" + (" (the majority class)" if self.rule == "majority class" else "")


def chance_level(labels: Iterable[int], num_classes: int) -> Chance:
    """The chance level of validation `labels` over `num_classes` classes (a class with no image counts as 0)."""
    counts = Counter(int(label) for label in labels)
    total = sum(counts.values())
    per_class = [counts.get(c, 0) for c in range(num_classes)]
    if total == 0 or num_classes <= 0:
        return Chance(100.0 / max(num_classes, 1), "1/classes")
    if len(set(per_class)) == 1 and len(counts) == num_classes:
        return Chance(100.0 / num_classes, "1/classes")
    return Chance(100.0 * max(counts.values()) / total, "majority class")


@dataclass(frozen=True)
class Reference:
    """The validation set a score was measured on: its size and chance level."""

    images: int
    classes: int
    chance: Chance

    @classmethod
    def of(cls, labels: Iterable[int], num_classes: int) -> "Reference":
        labels = [int(label) for label in labels]
        return cls(len(labels), num_classes, chance_level(labels, num_classes))

    def interval(self, top1: float) -> tuple[float, float]:
        """The Wilson 95 % interval of `top1` (percent) on these images, in percent."""
        return percent_interval(top1, self.images)

    def score(self, top1: float) -> str:
        """'15.00% (95% CI 8.8-24.4 on 80 val images, 10 classes; chance 10.0%, inside the interval)'."""
        low, high = self.interval(top1)
        inside = ", inside the interval" if low <= self.chance.percent <= high else ""
        return f"{top1:.2f}% (95% CI {low:.1f}-{high:.1f} {self.on()}; {self.chance.describe()}{inside})"

    def scores(self, named: dict[str, float]) -> str:
        """Several scores on the same images: 'k=20 30.00% [21.1-40.8], k=200 ... (95% CIs on 80 val images, ...)'."""
        parts = []
        for name, top1 in named.items():
            low, high = self.interval(top1)
            parts.append(f"{name} {top1:.2f}% [{low:.1f}-{high:.1f}]")
        return f"{', '.join(parts)} (95% CIs {self.on()}; {self.chance.describe()})"

    def on(self) -> str:
        return f"on {self.images} val images, {self.classes} classes"

    def to_dict(self) -> dict:
        """For results.json: what the intervals beside the scores are and the chance level they compare with."""
        return {
            "val_images": self.images,
            "classes": self.classes,
            "chance_top1": self.chance.percent,
            "chance_rule": self.chance.rule,
            "interval": "Wilson score interval, 95 %, on the val images (binomial), in percent",
        }


def random_init_note(
    command: str,
    from_scratch: bool,
    backbone: str | None,
    data: str | None,
    img_size: int | None,
    positions: str | None = None,
) -> str:
    """The random-init reference of a `probe` or `finetune` run: this run where it is one (--from-scratch), else the
    command that measures it (not run by default: it would cost as much as the run itself). `positions`: what the
    weights' ViT patch positions started from (`starting_positions`); learned ones are named, since --positions
    auto would give the reference the sin-cos table the weights never had."""
    if from_scratch:
        return "random init: this run (--from-scratch) is the reference"
    words = [f"pretexts {command} --from-scratch --backbone {backbone or 'NAME'}"]
    if img_size:
        words.append(f"--img-size {img_size}")
    if positions == "learned":
        words.append("--positions learned")
    if data:
        words.append(f"--data {shlex.quote(data)}")
    return f"random init not measured here: `{' '.join(words)}` (otherwise the same options) gives it"


def final_and_best_line(reference: dict) -> str:
    """`finetune`'s lines under its final and best top-1, from results.json's "reference": their intervals and the
    chance level, then the random-init reference."""
    final, best = (reference["ci95"][k] for k in ("final_top1", "best_top1"))
    on = f"on {reference['val_images']} val images"
    intervals = (
        f"95% CI {final[0]:.1f}-{final[1]:.1f} {on}"
        if final == best
        else f"95% CI final {final[0]:.1f}-{final[1]:.1f}, best {best[0]:.1f}-{best[1]:.1f} {on} (the best epoch is "
        f"picked on them, so it reads high)"
    )
    chance = Chance(reference["chance_top1"], reference["chance_rule"]).describe()
    return f"  {intervals}; {chance}\n  {reference['random_init']}"
