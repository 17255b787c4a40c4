"""Carrying vectors between the residual stream's basis and a layer's computation basis.

A rotated model (``Config.rotation``) keeps an orthogonal matrix at each boundary; every read
from the residual stream goes through ``read`` and every write back through ``write``. The
model and the tools that take its pieces apart (the cache's decompositions, head scores) share
these two functions, which is why they live below both.
"""

from __future__ import annotations

from torch import Tensor


def read(x: Tensor, rotation: Tensor | None) -> Tensor:
    """Carry a residual vector into a layer's computation basis."""
    return x if rotation is None else x @ rotation


def write(y: Tensor, rotation: Tensor | None) -> Tensor:
    """Carry a layer's output back into the residual basis."""
    return y if rotation is None else y @ rotation.T
