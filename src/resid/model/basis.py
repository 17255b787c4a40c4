"""Carrying vectors between the residual stream's basis and a layer's computation basis, and
the random rotations that make one.

A rotated model (``Config.rotation``) keeps an orthogonal matrix at each boundary; every read
from the residual stream goes through ``read`` and every write back through ``write``. The
model and the tools that take its pieces apart (the cache's decompositions, head scores) share
these two functions, which is why they live below both.
"""

from __future__ import annotations

import torch
from torch import Tensor


def read(x: Tensor, rotation: Tensor | None) -> Tensor:
    """Carry a residual vector into a layer's computation basis."""
    return x if rotation is None else x @ rotation


def write(y: Tensor, rotation: Tensor | None) -> Tensor:
    """Carry a layer's output back into the residual basis."""
    return y if rotation is None else y @ rotation.T


def haar_rotation(d: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    """A random orthogonal ``d x d`` matrix drawn from the Haar measure.

    QR of a Gaussian matrix is orthogonal but not uniformly distributed unless the signs of
    R's diagonal are folded into Q (Mezzadri 2007).
    """
    generator = torch.Generator().manual_seed(seed)
    gaussian = torch.randn(d, d, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
    return q.to(dtype)
