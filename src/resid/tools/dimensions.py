"""Outlier dimensions of the residual stream: which they are, and what zeroing them costs.

A dimension is an outlier when some token exceeds ``ratio`` times its own RMS there at a
``share`` of the layer boundaries or more (Dettmers et al.'s "at least 25% of layers"). What
ablating a set of dimensions costs is compared with ablating random sets, drawn uniformly or
matched to the outliers' magnitude (``matched_draw``), since a large dimension may matter only
because it is large.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor

from resid import stats
from resid.model import Transformer, hooks
from resid.model.readouts import next_token_losses


@torch.no_grad()
def outlier_dimensions(
    model: Transformer, tokens: Tensor, ratio: float = 6.0, share: float = 0.25, stream: Tensor | None = None
) -> tuple[list[int], Tensor]:
    """The outlier dimensions over ``tokens`` (``[window, pos]``), sorted, and every dimension's
    mean |x| over boundaries and tokens (``[d_model]``). ``stream``: ``tokens``' residual stream
    (``model.residual_stream(tokens)``), where the caller has it already."""
    if stream is None:
        stream = model.residual_stream(tokens)  # [boundary, window * position, d_model]
    per_boundary = [set(stats.outlier_dims(acts, ratio, relative=True).tolist()) for acts in stream]
    appearances = pd.Series([d for dims in per_boundary for d in dims], dtype=int).value_counts()
    outliers = sorted(appearances[appearances >= share * len(per_boundary)].index.tolist())
    return outliers, stream.abs().mean((0, 1))


def ablated_losses(
    model: Transformer, tokens: Tensor, dims: list[int], means: Tensor | None = None
) -> Tensor:
    """Each window's mean next-token loss (``[window]``) with ``dims`` set to zero, or to
    ``means`` (``[boundary, position, d_model]``) at each position, at every layer boundary
    (``model.resid_names()``: the input of every block and of the unembedding)."""
    ablation = []
    for boundary, name in enumerate(model.resid_names()):
        ablation += hooks.replace_coordinates(name, dims, 0.0 if means is None else means[boundary])
    return next_token_losses(model, tokens, ablation).mean(1)


def matched_draw(
    generator: torch.Generator, outliers: list[int], magnitude: Tensor, nearest: int = 5
) -> list[int]:
    """For each outlier dimension, a random one of the ``nearest`` non-outlier dimensions
    closest to it in mean |x| (``magnitude``, ``[d_model]``), none picked twice."""
    if len(magnitude) - 2 * len(outliers) + 1 < nearest:  # the last draw's candidates
        raise ValueError(f"{len(outliers)} outliers, {nearest} candidates each: {len(magnitude)} dimensions "
                         "are too few")  # fmt: skip
    chosen: list[int] = []
    for d in outliers:
        gap = (magnitude - magnitude[d]).abs()
        gap[outliers + chosen] = float("inf")
        candidates = gap.argsort()[:nearest]
        chosen.append(int(candidates[torch.randint(0, nearest, (1,), generator=generator)]))
    return chosen


def outlier_increases(
    model: Transformer, outliers: list[int], matched_sets: list[list[int]], tokens: Tensor
) -> tuple[Tensor, Tensor]:
    """Each window's loss increase from zeroing the outlier dimensions, and the mean over
    ``matched_sets`` of the increase from zeroing each: two ``[window]`` tensors."""
    intact = next_token_losses(model, tokens).mean(1)
    matched = torch.stack([ablated_losses(model, tokens, dims) - intact for dims in matched_sets]).mean(0)
    return ablated_losses(model, tokens, outliers) - intact, matched
