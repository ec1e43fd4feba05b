"""Declared task parameters: a default, a type and an allowed range, checked on construction."""
from dataclasses import dataclass
from typing import Any

from .errors import ParameterError


@dataclass(frozen=True)
class Param:
    """One task parameter. Values given as strings (from the CLI) are converted to `kind`."""

    default: Any
    kind: type = float
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    help: str = ""

    def describe(self) -> str:
        """'int in [2, 64], default 16' for `pretexts list --verbose`."""
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
        return f"{allowed}, default {self.default}"

    def convert(self, task: str, name: str, value: Any) -> Any:
        """Return `value` converted and checked; raise ParameterError naming the allowed range."""
        where = f"{task}: parameter '{name}'"
        value = self._coerce(where, value)
        if self.choices is not None and value not in self.choices:
            raise ParameterError(f"{where} is {value!r}; allowed: {', '.join(map(str, self.choices))}.")
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            raise ParameterError(f"{where} is {value}; allowed range is [{self.low}, {self.high}].")
        return value

    def _coerce(self, where: str, value: Any) -> Any:
        if self.kind is tuple:
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, (list, tuple)) or not items:
                raise ParameterError(f"{where} must be a non-empty list of names, got {value!r}.")
            return tuple(str(v).strip() for v in items)
        if self.kind is bool:  # bool("no") is True, so only these spellings count
            spelled = str(value).lower() if isinstance(value, (str, int)) else None
            if spelled in ("1", "true", "yes", "on"):
                return True
            if spelled in ("0", "false", "no", "off"):
                return False
            raise ParameterError(f"{where} must be true or false, got {value!r}.")
        if isinstance(value, bool) and self.kind is not bool:
            raise ParameterError(f"{where} must be {self.kind.__name__}, got a bool ({value}).")
        try:
            converted = self.kind(value)
        except (TypeError, ValueError):
            raise ParameterError(f"{where} must be {self.kind.__name__}, got {value!r}.") from None
        if self.kind is int and not isinstance(value, str) and converted != value:
            raise ParameterError(f"{where} must be a whole number, got {value!r}.")
        if self.kind is float and converted != converted:
            raise ParameterError(f"{where} must be a number, got NaN.")
        return converted
