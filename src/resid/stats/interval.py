"""The one interval type: an estimate with its confidence interval.

Every estimator in ``resid.stats`` returns an ``Interval``: a named triple, so it unpacks as
``estimate, low, high = ...`` and splats into ``claims.judge``; ``text`` is the one way a table
or a sentence writes it. ``stats.bootstrap`` fills it with tensors (one interval per cell of a
map), and ``item()`` turns a single cell into floats.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple


class Interval(NamedTuple):
    estimate: Any  # a float, or a tensor of cells from stats.bootstrap
    low: Any
    high: Any

    def item(self) -> Interval:
        """Floats, from a one-cell interval of tensors (or of floats, unchanged)."""
        return Interval(*(v.item() if hasattr(v, "item") else float(v) for v in self))

    def text(self, what: str = "", fmt: str = ".3g") -> str:
        """``"what 1.23 [0.98, 1.5]"``: how every table and sentence of the book writes an interval."""
        estimate, low, high = self.item()
        text = f"{estimate:{fmt}} [{low:{fmt}}, {high:{fmt}}]"
        return f"{what} {text}" if what else text

    def __str__(self) -> str:
        return self.text()

    @property
    def measured(self) -> bool:
        """False where either end is NaN (a quantity that could not be measured on these runs)."""
        return not (math.isnan(float(self.low)) or math.isnan(float(self.high)))

    def excludes(self, value: float) -> bool:
        """Whether the interval lies wholly on one side of ``value`` (a scalar interval)."""
        low, high = float(self.low), float(self.high)
        return low > value or high < value
