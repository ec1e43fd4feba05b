"""`HeldOut`: a method's held-out report, which the method creates and words. The loop and the CLI only call
`format()` (the line printed at the end of a run) and `to_dict()` (what results.json, log.jsonl and the logging
backend record: 'corrupted_mse', 'restored_mse', 'images', and 'trivial_mse' / 'trivial_restorer' / 'method'
where set)."""

import math
from dataclasses import dataclass, field
from typing import NamedTuple

# a baseline error at or below this is float rounding of 0: an input that equals its target (errors of [0, 1] pixels)
NOTHING_TO_RESTORE = 1e-12


@dataclass
class HeldOut:
    """The MSE to the target of a baseline (`corrupted_mse`: the corrupted input, or MAE's patch-mean fill), of
    each output of the method (`restored_mse`, one per name in `outputs`) and of the task's trivial restorer
    where it has one, on `images` held-out images.

    `measure` names the error in the printed line ('restoration MSE'); `baseline` names what `corrupted_mse` is
    the error of, as a column ('corrupted') and as the ratio's reference (`against`: "the corrupted input").

    A method's `held_out_error` returns one. The first four arguments are required; the field names are those
    results.json records whatever the measure is (a method that measures an error rate puts the baseline's in
    `corrupted_mse`).

    Args:
        images: How many held-out images were measured.
        corrupted_mse: The baseline's error: the corrupted input's (or MAE's patch-mean fill, or chance).
        restored_mse: The error of each output of the method, in order (the energy method: one per step).
        outputs: The name of each output in the printed line, as many as `restored_mse` ("step 1", "step 2").
        result: What the last output is, in a figure's title.
        measure: The error's name in the printed line.
        baseline: What `corrupted_mse` is the error of, as a column.
        against: The ratio's reference, in words.
        trivial_mse: The error of the task's trivial restorer, where it has one.
        trivial_restorer: That restorer in a few words ("visible-mean fill").
        method: Recorded as 'method' in `to_dict()` when set.
        extra: Further numbers recorded beside these.

    Examples:
        >>> from pretexts.engine import HeldOut
        >>> held = HeldOut(80, 0.75, [0.4], ("predicted",), result="predicted", measure="rotation error rate",
        ...                baseline="chance", against="chance", method="rotation")
        >>> held.format()
        "held-out rotation error rate on 80 images: chance 0.75000 -> predicted 0.40000 (0.53x chance's error)"
        >>> held.to_dict()
        {'corrupted_mse': 0.75, 'restored_mse': [0.4], 'images': 80, 'method': 'rotation'}
    """

    images: int
    corrupted_mse: float
    restored_mse: list[float]
    outputs: tuple[str, ...]
    result: str = "restored"  # what the last output is, in a figure's title
    measure: str = "restoration MSE"
    baseline: str = "corrupted"
    against: str = "the corrupted input"
    trivial_mse: float | None = None
    trivial_restorer: str | None = None
    method: str | None = None  # recorded in to_dict() as 'method' when set (the baselines name themselves)
    extra: dict = field(default_factory=dict)  # further numbers a method records beside these

    def to_dict(self) -> dict:
        """What results.json, log.jsonl and the logging backend record: 'corrupted_mse', 'restored_mse',
        'images', and 'method' / 'trivial_mse' / 'trivial_restorer' where set, then `extra`."""
        held = {"corrupted_mse": self.corrupted_mse, "restored_mse": list(self.restored_mse), "images": self.images}
        if self.method is not None:
            held["method"] = self.method
        if self.trivial_mse is not None:
            held.update(trivial_mse=self.trivial_mse, trivial_restorer=self.trivial_restorer)
        return {**held, **self.extra}

    def format(self) -> str:
        """'held-out restoration MSE on 80 images: corrupted 0.15630 -> step 1 0.09 -> step 2 0.07 (0.45x the
        corrupted input's error; a trivial restorer ... gets 0.19x: the model is not better than it)'."""
        outputs = " -> ".join(f"{name} {e:.5f}" for name, e in zip(self.outputs, self.restored_mse))
        ratio = self.ratio()
        images = f"{self.images} image{'' if self.images == 1 else 's'}"
        verdict = (
            f"{self.against} already equals the target: nothing to restore"
            if ratio is None
            else f"{ratio:.2f}x {self.against}'s error{self.versus_trivial()}"
        )
        return f"held-out {self.measure} on {images}: {self.baseline} {self.corrupted_mse:.5f} -> {outputs} ({verdict})"

    def ratio(self) -> float | None:
        """The last output's error over the baseline's; None where the baseline's is 0 to float rounding (a
        colorization of grayscale images: the input already is the target), where a ratio would be noise."""
        if abs(self.corrupted_mse) <= NOTHING_TO_RESTORE:
            return None
        return self.restored_mse[-1] / self.corrupted_mse if self.restored_mse else math.nan

    def versus_trivial(self, as_ratio: bool = True) -> str:
        """'; a trivial restorer (visible-mean fill) gets 0.15x: the model is not better than it', for the end of a
        line whose ratios are to the baseline's error (`as_ratio` False: its MSE, for a line of MSEs); '' when
        there is no trivial restorer, it is the baseline itself, or nothing was restored."""
        trivial, corrupted = self.trivial_mse, self.corrupted_mse
        if trivial is None or not self.restored_mse or self.trivial_restorer == self.baseline:
            return ""
        ratio = f"{trivial / corrupted:.2f}x" if as_ratio and corrupted > NOTHING_TO_RESTORE else f"MSE {trivial:.5f}"
        restored = self.restored_mse[-1]
        verdict = (
            f"the model beats it ({restored / trivial:.2f}x its error)"
            if trivial and restored < trivial
            else "the model is not better than it"
        )
        return f"; a trivial restorer ({self.trivial_restorer or 'trivial'}) gets {ratio}: {verdict}"

    def figure_numbers(self) -> str:
        """'restoration MSE of these 8: corrupted 0.1563, restored 0.0675, trivial 0.0301 (visible-mean fill)' for a
        figure's title, led by `measure`: the methods measure different things (MAE per-patch normalised pixels);
        '' when nothing was restored."""
        if not self.restored_mse:
            return ""
        line = (
            f"{self.measure} of these {self.images}: {self.baseline} {self.corrupted_mse:.4f}, {self.result} "
            f"{self.restored_mse[-1]:.4f}"
        )
        if self.trivial_mse is not None and self.trivial_restorer != self.baseline:
            line += f", trivial {self.trivial_mse:.4f} ({self.trivial_restorer or 'trivial'})"
        return line


def fill_report(
    images: int, fill_mse: float, reconstructed_mse: float, fill: str, measure: str, method: str
) -> HeldOut:
    """The report of a masked-prediction baseline (MAE, SimMIM), measured against a fill of the masked part
    (`fill`: 'visible-mean fill'), which is both its baseline and its trivial restorer."""
    return HeldOut(
        images,
        fill_mse,
        [reconstructed_mse],
        ("reconstructed",),
        result="reconstructed",
        measure=measure,
        baseline=fill,
        against=f"the {fill}",
        method=method,
        trivial_mse=fill_mse,
        trivial_restorer=fill,
    )


def with_figure_numbers(title: str, held: HeldOut | None) -> str:
    """The figure's numbers on a first line above `title` (the loop appends the epoch to the title)."""
    numbers = held.figure_numbers() if held is not None else ""
    return f"{numbers}\n{title}" if numbers else title


class Figure(NamedTuple):
    """A method's epoch figure: column name -> images `(B, 3, H, W)` in [0, 1], left to right, and its title (the
    loop appends the epoch)."""

    columns: dict
    title: str
