"""Declared task parameters: a default, a type and an allowed range, checked on construction."""

import reprlib
from dataclasses import dataclass
from typing import Any

from .errors import ParameterError

REFERENCE_SIZE = 224  # the paper's image size: a scaled parameter's declared default is its value there
EXAMPLE_SIZE = 32  # the CLI's default --img-size, the second size the listing names a scaled default at
MIN_CELLS = 4  # a scaled length fits an image when it leaves at least 4 of its cells per side
AUTO = "auto"  # the value of a scaled parameter left to follow the image size
SCALARS = (str, int, float)  # what a list of names may hold


def brief(value: Any) -> str:
    """repr(value) cut to a line: a value from a config file may be a huge nested list."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxtuple = 2, 4, 4, 4
    text = short.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Param:
    """One task parameter. Values given as strings (from the CLI) are converted to `kind`.

    Methods (`Method.method_params`) and probes (`register_probe`) declare their options the same way. A task's
    declared parameters become attributes of the task, converted and checked; `pretexts list -v` shows each with
    `describe()` and its `help`.

    Args:
        default: The value when none is given (a scaled one's: its value at 224 px, the paper's size).
        kind: The type values are converted to: int, float, str, bool ("true"/"false", "yes"/"no", "on"/"off") or
            tuple (a list of names; "a,b" from the CLI).
        low: The smallest value allowed (inclusive); None: no bound.
        high: The largest value allowed (inclusive); None: no bound.
        choices: The only values allowed, where it is a choice.
        help: One line for `pretexts list -v` (and the CLI's help).
        scaled: Non-empty for a length in pixels that follows the image size, naming its unit ("cells"): left
            unset, the task takes the paper's value at 224 px scaled to its images (`scaled_default`); a value
            given must leave at least 4 of them per side.

    Examples:
        >>> from pretexts import Param
        >>> quality = Param(10.0, float, 1.0, 100.0, help="lowest JPEG quality")
        >>> quality.convert("jpeg", "quality_low", "25")
        25.0
        >>> quality.describe()
        'float in [1.0, 100.0], default 10.0'
        >>> quality.convert("jpeg", "quality_low", 0)
        Traceback (most recent call last):
        ...
        pretexts.errors.ParameterError: jpeg: parameter 'quality_low' is 0.0; allowed range is [1.0, 100.0].
        >>> grid = Param(16, int, 1, 1024, scaled="cells")  # the paper's grid of 16 px cells at 224 px
        >>> grid.scaled_default(224), grid.scaled_default(32)
        (16, 2)
    """

    default: Any
    kind: type = float
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    help: str = ""
    # Non-empty: a length in pixels (a mask's grid cell, a downsampling factor) whose `default` is the paper's
    # value at 224 px; a task built without it takes that value scaled to its images (`scaled_default`), and an
    # explicit value must leave at least MIN_CELLS of these per side (`check_size`), e.g. "cells".
    scaled: str = ""

    def largest(self, size: int) -> int:
        """The largest scaled value that fits a `size`-pixel side: one that leaves MIN_CELLS whole cells."""
        return max(1, size // MIN_CELLS)

    def scaled_default(self, size: int) -> int:
        """The paper's default at 224 px scaled to `size` px, rounded, and kept within [2, `largest(size)`]:
        16 at 224 px is 2 at 32 px and 5 at 64 px."""
        return min(max(round(self.default * size / REFERENCE_SIZE), 2), self.largest(size))

    def check_size(self, task: str, name: str, value: int, height: int, width: int) -> None:
        """Raise a one-line ParameterError naming a value that fits when `value` leaves too few cells."""
        size = min(height, width)
        if value > self.largest(size):
            at = f"{size} px" if height == width else f"{height}x{width} px"
            # whole cells, as `largest` counts them
            left = (
                f"leaves {height // value}x{width // value} {self.scaled} at {at}"
                if value <= size
                else f"is larger than the image ({at})"
            )
            raise ParameterError(
                f"{task}: {name} {value} {left}; use {name} <= {self.largest(size)} "
                f"(e.g. {self.scaled_default(size)}, the paper's {self.default} at {REFERENCE_SIZE} px scaled)."
            )

    def default_text(self) -> str:
        """'16' or, for a scaled parameter, '16 at 224 px, 2 at 32 px' (the plain listing's defaults)."""
        if not self.scaled:
            return str(self.default)
        return f"{self.default} at {REFERENCE_SIZE} px, {self.scaled_default(EXAMPLE_SIZE)} at {EXAMPLE_SIZE} px"

    def describe(self) -> str:
        """'int in [2, 64], default 16' for `pretexts list --verbose`; a scaled parameter's default is named at
        224 px and at 32 px."""
        if self.choices is not None:
            allowed = "one of " + ", ".join(map(str, self.choices))
        elif self.kind is tuple:
            allowed = "list of names"
        elif self.low is not None or self.high is not None:
            lo = "-inf" if self.low is None else self.low
            hi = "inf" if self.high is None else self.high
            allowed = f"{self.kind.__name__} in [{lo}, {hi}]"
        else:
            allowed = self.kind.__name__
        if self.scaled:
            return f"{allowed}, default scaled to the image: {self.default_text()}"
        return f"{allowed}, default {self.default}"

    def range_text(self) -> str:
        """' in [1, 64]' where the value is bounded, else ''."""
        return "" if self.low is None and self.high is None else f" in [{self.low}, {self.high}]"

    def convert(self, task: str, name: str, value: Any) -> Any:
        """Return `value` converted and checked; raise ParameterError naming the allowed range."""
        where = f"{task}: parameter '{name}'"
        value = self._coerce(where, value)
        if self.choices is not None and value not in self.choices:
            raise ParameterError(f"{where} is {value!r}; allowed: {', '.join(map(str, self.choices))}.")
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            raise ParameterError(f"{where} is {brief(value)}; allowed range is [{self.low}, {self.high}].")
        return value

    def _coerce(self, where: str, value: Any) -> Any:
        if self.kind is tuple:
            items = value.split(",") if isinstance(value, str) else value
            # names are scalars: str() of a nested list (a YAML billion laughs: 10^9 items) would never end
            if not isinstance(items, (list, tuple)) or not items or not all(isinstance(v, SCALARS) for v in items):
                raise ParameterError(f"{where} must be a non-empty list of names, got {brief(value)}.")
            return tuple(str(v).strip() for v in items)
        if self.kind is bool:  # bool("no") is True, so only these spellings count
            spelled = str(value).lower() if isinstance(value, (str, int)) else None
            if spelled in ("1", "true", "yes", "on"):
                return True
            if spelled in ("0", "false", "no", "off"):
                return False
            raise ParameterError(f"{where} must be true or false, got {brief(value)}.")
        if isinstance(value, bool) and self.kind is not bool:
            raise ParameterError(f"{where} must be {self.kind.__name__}, got a bool ({value}).")
        try:
            converted = self.kind(value)
        except (TypeError, ValueError):
            raise ParameterError(f"{where} must be {self.kind.__name__}, got {brief(value)}.") from None
        except OverflowError:  # int(inf), float(10**400): no such number
            what = "a whole number" if self.kind is int else self.kind.__name__
            raise ParameterError(f"{where} must be {what}{self.range_text()}, got {brief(value)}.") from None
        if self.kind is int and not isinstance(value, str) and converted != value:
            raise ParameterError(f"{where} must be a whole number, got {value!r}.")
        if self.kind is float and converted != converted:
            raise ParameterError(f"{where} must be a number, got NaN.")
        return converted
