"""Statistics of activation vectors: kurtosis, rotations, outlier dimensions, massive activations.

All functions take activations with the model dimension last, ``[..., d_model]``, and treat
every leading index as one token.
"""

from __future__ import annotations

import torch
from torch import Tensor


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


def kurtosis(acts: Tensor) -> Tensor:
    """Kurtosis of each activation vector across its coordinates: E[(x - mean)^4] / var^2.

    A vector whose coordinates look like Gaussian samples scores 3; a few coordinates that
    dwarf the rest push it far above 3.
    """
    x = acts.double()
    centred = x - x.mean(-1, keepdim=True)
    variance = centred.pow(2).mean(-1)
    return (centred.pow(4).mean(-1) / variance.pow(2)).to(acts.dtype)


def kurtosis_metric(acts: Tensor) -> float:
    """The privileged-basis metric of Elhage et al. (2023): per-token kurtosis, averaged over tokens."""
    return kurtosis(acts.reshape(-1, acts.shape[-1])).mean().item()


def rotated_kurtosis(acts: Tensor, n_rotations: int = 8, seed: int = 0) -> tuple[float, float]:
    """The control: the same metric after Haar-random rotations, as (mean, sd) over rotations.

    A rotation changes nothing a basis-free model could see, so whatever kurtosis survives it
    is what the representation has regardless of basis.
    """
    flat = acts.reshape(-1, acts.shape[-1]).float()
    values = torch.tensor(
        [kurtosis_metric(flat @ haar_rotation(flat.shape[-1], seed + i)) for i in range(n_rotations)]
    )
    sd = values.std().item() if n_rotations > 1 else 0.0
    return values.mean().item(), sd


def outlier_dims(acts: Tensor, threshold: float = 6.0, relative: bool = False) -> Tensor:
    """Indices of the coordinates where any token exceeds the threshold in absolute value.

    ``relative=False`` is Dettmers' absolute test, |x| > 6, which depends on the scale of the
    residual stream. ``relative=True`` tests |x_i| > threshold x RMS(x) of the token's own
    vector: the value the next normalisation layer would see, so it is free of scale. For a
    Gaussian vector it almost never fires (P(|z| > 6) is about 2e-9).
    """
    flat = acts.reshape(-1, acts.shape[-1]).float()
    limit = threshold * flat.pow(2).mean(-1, keepdim=True).sqrt() if relative else threshold
    return torch.nonzero((flat.abs() > limit).any(0)).flatten()


def rms(acts: Tensor) -> float:
    """Root mean square over every entry."""
    return acts.float().pow(2).mean().sqrt().item()


def top_energy_share(acts: Tensor, k: int = 4) -> float:
    """The share of the total squared activation held by the k coordinates that hold most of it."""
    energy = acts.reshape(-1, acts.shape[-1]).float().pow(2).sum(0)
    return (energy.topk(k).values.sum() / energy.sum()).item()


def massive_activations(acts: Tensor, k: int = 5) -> list[dict]:
    """The k largest |x| in ``[n_tokens, d_model]`` activations, with their token index and dim."""
    flat = acts.reshape(-1, acts.shape[-1]).float()
    top = flat.abs().flatten().topk(k)
    d = flat.shape[-1]
    return [
        {"value": flat.flatten()[i].item(), "token": int(i) // d, "dim": int(i) % d}
        for i in top.indices.tolist()
    ]
