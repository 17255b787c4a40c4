"""Statistics of activation vectors: kurtosis, rotations, outlier dimensions, massive activations.

All functions take activations with the model dimension last, ``[..., d_model]``, and treat
every leading index as one token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from resid.model.basis import haar_rotation  # noqa: F401  (re-exported: rotations are drawn here too)

from .interval import Interval


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


def principal_kurtosis(acts: Tensor) -> float:
    """The kurtosis metric in the activations' own principal axes (the eigenvectors of their
    uncentred second-moment matrix). It is the same in every basis the activations are written
    in (up to the choice of axes inside a subspace of equal variance, such as an isotropic
    bulk: a relative 1e-4 in the tests): high when a few directions carry most of the energy,
    whether or not they are coordinate axes. Beside ``kurtosis_metric`` it separates "the
    stream has a few heavy directions" from "those directions are the coordinates"."""
    x = acts.reshape(-1, acts.shape[-1]).double()
    _, axes = torch.linalg.eigh(x.T @ x / len(x))
    return kurtosis_metric(x @ axes)


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


# --- uncertainty: over prompts for pretrained models, over seeds for trained ones ---


def bootstrap(values: Tensor, n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> Interval:
    """The mean over the first axis (prompts, items or windows) with a percentile bootstrap
    interval: an ``Interval`` of tensors, each shaped like ``values[0]`` (``.item()`` for floats).

    A resample's mean is a multinomial count vector times the values, so every cell of a
    ``[prompt, layer, head]`` map gets its interval from one matrix product.
    """
    if len(values) < 2:
        raise ValueError("a bootstrap needs at least two values along the first axis")
    flat = values.double().reshape(len(values), -1)
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(values), (n_resamples, len(values)), generator=generator)
    counts = torch.zeros(n_resamples, len(values), dtype=torch.float64).scatter_add_(
        1, picks, torch.ones_like(picks, dtype=torch.float64)
    )
    means = counts @ flat / len(values)  # [resample, cell]
    tail = (1 - level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=torch.float64), dim=0)
    shape = values.shape[1:]
    return Interval(flat.mean(0).reshape(shape), low.reshape(shape), high.reshape(shape))


def ratio_bootstrap(
    numerator: Tensor, denominator: Tensor, n_resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> Interval:
    """The ratio of two means over the same prompts, mean(numerator) / mean(denominator), with a
    percentile bootstrap interval that resamples prompts for both at once: ``(ratio, low, high)``.

    The first axis is the prompt. ``numerator`` may carry more axes (a ``[prompt, layer,
    position]`` patching map: every cell gets its interval from the same resamples) and
    ``denominator`` either the same shape or only the prompt axis; then the three are tensors
    shaped like one prompt's cells, else floats."""
    if len(numerator) != len(denominator) or len(numerator) < 2:
        raise ValueError("a ratio bootstrap needs two equal-length vectors of at least two values")
    cells = numerator.shape[1:]
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(numerator), (n_resamples, len(numerator)), generator=generator)

    def ratio_of_means(num: Tensor, den: Tensor, axis: int) -> Tensor:
        num, den = num.mean(axis), den.mean(axis)
        return num / den.reshape(den.shape + (1,) * (num.dim() - den.dim()))

    ratios = ratio_of_means(numerator.double()[picks], denominator.double()[picks], 1)  # [resample, *cells]
    tail = (1 - level) / 2
    low, high = torch.quantile(ratios, torch.tensor([tail, 1 - tail], dtype=torch.float64), dim=0)
    estimate = ratio_of_means(numerator.double(), denominator.double(), 0)
    if not cells:
        return Interval(estimate.item(), low.item(), high.item())
    return Interval(estimate, low, high)


def bootstrap_statistic(
    statistic, *columns: Tensor, n_resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> Interval:
    """Any statistic of paired columns (say, the correlation of two scores over the same edges)
    with a percentile bootstrap interval that resamples rows jointly: ``(value, low, high)``."""
    n = len(columns[0])
    if n < 3 or any(len(c) != n for c in columns):
        raise ValueError("a bootstrap needs paired columns of at least three rows")
    generator = torch.Generator().manual_seed(seed)
    values = torch.tensor(
        [
            statistic(*(c[rows] for c in columns))
            for rows in torch.randint(0, n, (n_resamples, n), generator=generator)
        ],
        dtype=torch.float64,
    )
    values = values[values.isfinite()]  # a resample with no spread has no correlation
    tail = (1 - level) / 2
    low, high = torch.quantile(values, torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return Interval(float(statistic(*columns)), low.item(), high.item())


def auroc(positive: Tensor, negative: Tensor) -> Tensor:
    """The area under the ROC curve of each column (a neuron, say) as a score telling positive
    rows from negative ones: the probability that a positive row's value exceeds a negative
    row's, ties counting half (0.5 by chance, 1 for perfect separation, 0 reversed).
    ``positive [n_pos, ...]`` and ``negative [n_neg, ...]`` -> ``[...]``."""
    shape = positive.shape[1:]
    pos = positive.reshape(len(positive), -1).T.contiguous().double()  # [column, n_pos]
    neg = negative.reshape(len(negative), -1).T.contiguous().double().sort(-1).values  # [column, n_neg]
    below = torch.searchsorted(neg, pos, side="left")  # negatives strictly below each positive
    tied = torch.searchsorted(neg, pos, side="right") - below
    area = (below + 0.5 * tied).sum(-1) / (pos.shape[1] * neg.shape[1])
    return area.reshape(shape).float()


def auroc_interval(
    positive: Tensor, negative: Tensor, n_resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> Interval:
    """A one-column ``auroc`` with a percentile bootstrap interval that resamples the positive and
    the negative rows apart (each keeps its count)."""
    generator = torch.Generator().manual_seed(seed)
    rows_pos = torch.randint(0, len(positive), (n_resamples, len(positive)), generator=generator)
    rows_neg = torch.randint(0, len(negative), (n_resamples, len(negative)), generator=generator)
    values = auroc(positive[rows_pos].T, negative[rows_neg].T).double()  # [resample]
    tail = (1 - level) / 2
    low, high = torch.quantile(values, torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return Interval(auroc(positive[:, None], negative[:, None]).item(), low.item(), high.item())


def one_vs_rest_auroc(values: Tensor, labels: Tensor) -> Tensor:
    """For each label (``0 .. n_labels - 1``), ``auroc`` of every column with that label's rows
    positive and every other row negative: ``values [n, ...]``, ``labels [n]`` ->
    ``[n_labels, ...]``."""
    groups = range(int(labels.max()) + 1)
    return torch.stack([auroc(values[labels == g], values[labels != g]) for g in groups])


def stratified_bootstrap(
    statistic, labels: Tensor, n_resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> Interval:
    """A statistic of a set of labelled rows, ``statistic(rows) -> float`` for an index tensor,
    with a percentile bootstrap interval that resamples the rows within each label (each label
    keeps its count: a one-vs-rest AUROC keeps its positives and its negatives)."""
    generator = torch.Generator().manual_seed(seed)
    members = [torch.nonzero(labels == g).flatten() for g in labels.unique()]
    if any(len(m) < 2 for m in members):
        raise ValueError("a stratified bootstrap needs at least two rows of every label")
    draws = torch.cat(
        [m[torch.randint(0, len(m), (n_resamples, len(m)), generator=generator)] for m in members], dim=1
    )  # [resample, n]
    values = torch.tensor([statistic(rows) for rows in draws], dtype=torch.float64)
    tail = (1 - level) / 2
    low, high = torch.quantile(values, torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return Interval(float(statistic(torch.arange(len(labels)))), low.item(), high.item())


def pearson(x: Tensor, y: Tensor) -> float:
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    return (x @ y / (x.norm() * y.norm())).item()


def _seed_values(values: Tensor | list[float]) -> Tensor:
    """One value per seed as float64; copied as floats, since pandas may hand over a read-only
    array, which torch warns about."""
    if isinstance(values, Tensor):
        return values.double()
    return torch.tensor([float(v) for v in values], dtype=torch.float64)


def t_interval(values: Tensor | list[float], level: float = 0.95) -> Interval:
    """The mean of a few independent values (one per training seed) with Student's t interval:
    ``(mean, low, high)``. With few seeds this is wide, and honestly so."""
    from scipy import stats as scipy_stats

    x = _seed_values(values)
    if len(x) < 2:
        raise ValueError("an interval over seeds needs at least two seeds")
    half = scipy_stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std() / len(x) ** 0.5
    mean = x.mean().item()
    return Interval(mean, mean - half.item(), mean + half.item())


def welch_interval(a: Tensor | list[float], b: Tensor | list[float], level: float = 0.95) -> Interval:
    """The difference of two means over independent seeds, ``mean(a) - mean(b)``, with Welch's
    t interval (unequal variances): ``(difference, low, high)``."""
    from scipy import stats as scipy_stats

    x, y = _seed_values(a), _seed_values(b)
    if len(x) < 2 or len(y) < 2:
        raise ValueError("a difference over seeds needs at least two seeds on each side")
    vx, vy = x.var() / len(x), y.var() / len(y)
    dof = (vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1))
    half = scipy_stats.t.ppf(0.5 + level / 2, dof.item()) * (vx + vy).sqrt()
    difference = (x.mean() - y.mean()).item()
    return Interval(difference, difference - half.item(), difference + half.item())


def resample_interval(values: Tensor, level: float = 0.95) -> Interval:
    """``(estimate, low, high)`` of a statistic computed on all items (row 0) and on bootstrap
    resamples of them (the other rows), as ``tasks.resampled_scores`` lays scores out: any
    statistic of those scores, computed row by row, gets its percentile interval here."""
    values = values.double()
    if len(values) < 3:
        raise ValueError("an interval needs the estimate and at least two resamples")
    tail = (1 - level) / 2
    low, high = torch.quantile(values[1:], torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return Interval(values[0].item(), low.item(), high.item())


def resampled_mean(values: Tensor, seed: int = 0) -> Tensor:
    """A mean over a few random draws (the shuffled orders of a layer plan, say) inside a
    bootstrap laid out as ``resample_interval`` reads it (``[1 + resample, draw]``): row 0 averages
    every draw, each resample row as many draws picked with replacement, so that the interval
    carries the spread between draws as well as between items. ``[1 + resample]``."""
    values = values.double()
    n_rows, n_draws = values.shape
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, n_draws, (n_rows - 1, n_draws), generator=generator)
    return torch.cat([values[:1].mean(1), values[1:].gather(1, picks).mean(1)])


def wilson_interval(successes: int, n: int, level: float = 0.95) -> Interval:
    """A proportion with its Wilson score interval, which stays inside [0, 1] and is honest for
    a rare event (the normal approximation is not): ``(k / n, low, high)``."""
    if n <= 0:
        raise ValueError("a proportion needs at least one trial")
    z = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + level / 2, dtype=torch.float64)).item()
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


def spearman(x: Tensor, y: Tensor) -> float:
    """Spearman's rank correlation (ties get their mean rank)."""

    def ranks(v: Tensor) -> Tensor:
        v = v.double().flatten()
        order = v.argsort()
        sorted_v = v[order]
        first = torch.cat([torch.tensor([True]), sorted_v[1:] != sorted_v[:-1]])
        group = first.cumsum(0) - 1  # [n]: which run of equal values each sorted entry is in
        counts = torch.bincount(group)
        starts = counts.cumsum(0) - counts
        mean_rank = starts.double() + (counts.double() - 1) / 2
        out = torch.empty_like(v)
        out[order] = mean_rank[group]
        return out

    return pearson(ranks(x), ranks(y))


def cross_window_cosine(unit: Tensor) -> float:
    """Anisotropy: the mean cosine between two tokens' vectors from different windows, from unit
    vectors ``[window, token, d]``, without forming the pairs: the squared norm of the sum of all
    vectors, less each window's own, over the number of cross-window pairs."""
    sums = unit.double().sum(1)  # [window, d]
    n = unit.shape[1]
    cross = sums.sum(0).pow(2).sum() - sums.pow(2).sum()
    n_windows = unit.shape[0]
    return (cross / (n * n * n_windows * (n_windows - 1))).item()


def window_statistics(stream: Tensor, n_windows: int, threshold: float = 6.0) -> tuple[Tensor, Tensor]:
    """The residual stream read at every boundary, ``[boundary, window * position, d_model]``,
    window by window, so that a bootstrap can resample whole windows: which coordinates some
    token of each window makes a scale-free outlier (``outlier_dims(..., relative=True)``),
    ``[window, boundary, d_model]``, and each window's mean per-token kurtosis,
    ``[window, boundary]``. Over all windows they give back the whole sample's outlier sets and
    ``kurtosis_metric``."""
    n_boundaries, n_tokens, d_model = stream.shape
    by_window = stream.float().reshape(n_boundaries, n_windows, n_tokens // n_windows, d_model)
    token_rms = by_window.pow(2).mean(-1, keepdim=True).sqrt()
    outliers = (by_window.abs() > threshold * token_rms).any(2).transpose(0, 1)  # [window, boundary, d]
    kurt = torch.stack([kurtosis(layer).reshape(n_windows, -1).mean(-1) for layer in stream], dim=1)
    return outliers, kurt  # [window, boundary, d_model], [window, boundary]
