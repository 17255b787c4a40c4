"""Distributed alignment search (DAS; Geiger et al. 2024): a variable located in a learned,
rotated subspace of an activation rather than in its coordinates.

An *interchange intervention* on a k-dimensional subspace with orthonormal basis ``W``
(``[d, k]``) sets the subspace's part of a base input's activation to a source input's, and
leaves the rest: ``h <- h_base + (h_source - h_base) W W^T``. If the subspace holds a variable of
a high-level causal model (say, which of two names is repeated in an IOI prompt), the model then
behaves as the source's value of that variable says. *Interchange-intervention accuracy* (IIA)
is the share of pairs where it does. DAS learns ``W`` by gradient descent on the model's loss
toward the counterfactual label, everything else frozen; the same intervention on ``k``
coordinates (``W`` a selection of the identity's columns) or a random subspace is its baseline.

The model is reached through ``run_from(h, rows) -> logits``, which runs the network on from
the intervened site for the pairs ``rows`` (``None``: all of them, in order), ``h`` their
activations there; ``resid_site`` builds one for the residual stream of a ``Transformer``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn.utils.parametrizations import orthogonal

from resid.model import Transformer, key_value_prefix
from resid.model.cache import act_name

RunFrom = Callable[[Tensor, Tensor | None], Tensor]  # (activations at the site, pair rows) -> logits


def interchange(base: Tensor, source: Tensor, basis: Tensor) -> Tensor:
    """``base`` with its part in the span of ``basis`` (``[d, k]``, orthonormal columns) taken
    from ``source``: ``[batch, d]``."""
    return base + (source - base) @ basis @ basis.T


def coordinate_basis(d: int, coordinates: list[int] | Tensor) -> Tensor:
    """The standard-basis subspace of the given coordinates: ``[d, k]``."""
    return torch.eye(d)[:, torch.as_tensor(coordinates, dtype=torch.long)]


def random_basis(d: int, k: int, seed: int = 0) -> Tensor:
    """A uniformly random k-dimensional subspace, as an orthonormal basis ``[d, k]``: the column
    space of a Gaussian matrix is uniform over subspaces. (QR's sign convention picks the basis
    within it, which ``stats.haar_rotation`` corrects for a uniform *rotation*; an interchange
    projects onto the subspace and never sees the basis.)"""
    gaussian = torch.randn(d, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.linalg.qr(gaussian).Q.float()


@torch.no_grad()
def interchange_accuracy(
    run_from: RunFrom, base: Tensor, source: Tensor, basis: Tensor, label: Tensor, other: Tensor
) -> Tensor:
    """Per pair, whether the intervened model prefers the counterfactual ``label`` to ``other``
    (``[batch]`` token ids each): ``[batch]`` booleans, whose mean is the IIA."""
    logits = run_from(interchange(base, source, basis.to(base.dtype)), None).float()
    rows = torch.arange(len(label))
    return logits[rows, label] > logits[rows, other]


@torch.no_grad()
def coordinate_effects(
    run_from: RunFrom, base: Tensor, source: Tensor, label: Tensor, other: Tensor, chunk: int = 8
) -> Tensor:
    """For every coordinate alone, how much interchanging it moves the logit difference
    ``label - other`` toward the counterfactual, averaged over pairs: ``[d]``; the ranking by
    which the best k standard-basis coordinates are chosen. ``chunk`` coordinates run in one
    batch."""
    n, d = base.shape
    rows = torch.arange(n)

    def margin(logits: Tensor, pairs: Tensor) -> Tensor:
        logits = logits.float()
        return logits[torch.arange(len(pairs)), label[pairs]] - logits[torch.arange(len(pairs)), other[pairs]]

    before = margin(run_from(base, None), rows).mean()
    effects = torch.empty(d)
    for first in range(0, d, chunk):
        coordinates = list(range(first, min(first + chunk, d)))
        swapped = base.repeat(len(coordinates), 1)  # [coordinate * pair, d]
        for j, c in enumerate(coordinates):
            swapped[j * n : (j + 1) * n, c] = source[:, c]
        pairs = rows.repeat(len(coordinates))
        after = margin(run_from(swapped, pairs), pairs).view(len(coordinates), n).mean(1)
        effects[first : first + len(coordinates)] = after - before
    return effects


class Subspace(nn.Module):
    """A learnable k-dimensional subspace of R^d, kept orthonormal by a parametrisation."""

    def __init__(self, d: int, k: int, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.map = orthogonal(nn.Linear(k, d, bias=False))  # weight [d, k], orthonormal columns

    @property
    def basis(self) -> Tensor:
        return self.map.weight


def train_subspace(
    run_from: RunFrom,
    base: Tensor,
    source: Tensor,
    label: Tensor,
    k: int,
    steps: int = 200,
    lr: float = 1e-2,
    batch_size: int = 32,
    seed: int = 0,
    progress: Callable | None = None,
) -> tuple[Tensor, list[float]]:
    """DAS: the k-dimensional subspace whose interchange makes the model predict ``label`` (the
    counterfactual's answer), learned with Adam on the cross-entropy at the intervened output.
    Returns the basis ``[d, k]`` (detached) and the loss of every step."""
    subspace = Subspace(base.shape[-1], k, seed).to(base.device)
    optimiser = torch.optim.Adam(subspace.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    steps_iter = progress(range(steps)) if progress else range(steps)
    for _ in steps_iter:
        rows = torch.randint(0, len(base), (min(batch_size, len(base)),), generator=generator)
        basis = subspace.basis.to(base.dtype)
        logits = run_from(interchange(base[rows], source[rows], basis), rows).float()
        loss = nn.functional.cross_entropy(logits, label[rows])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return subspace.basis.detach().float(), losses


def resid_site(
    model: Transformer, tokens: Tensor, boundary: int, position: int = -1
) -> tuple[Tensor, RunFrom]:
    """The residual stream at layer ``boundary`` (0: the embedding; ``l``: after block ``l - 1``)
    and ``position`` of every prompt, ``[batch, d_model]``; and ``run_from(h)``, the last
    position's logits with ``h`` written there (the other positions as they were) for the
    prompts ``rows`` (``None``: all), running only the blocks from ``boundary`` on."""
    n_pos, index = tokens.shape[1], position % tokens.shape[1]
    context = model.context(n_pos)
    with torch.no_grad():
        stream = model.embed_tokens(tokens)
        for block in model.blocks[:boundary]:
            stream = block(stream, *context)
    stream = stream.detach()  # [batch, pos, d_model]
    prefix: dict[int, tuple[Tensor, Tensor]] = {}

    def later_keys_values() -> dict[int, tuple[Tensor, Tensor]]:
        """The later blocks' keys and values before the site, which no write there changes: one
        clean pass, on the first call (a source's site is read, never run from)."""
        if not prefix:
            later = range(boundary, model.cfg.n_layers)
            cache: dict[str, Tensor] = {}

            def store(x: Tensor, hook) -> None:
                cache[hook.name] = x

            keep = [(act_name(h, i), store) for i in later for h in ("rot_k", "v")]
            with torch.no_grad(), model.hooks(keep):
                x = stream
                for block in model.blocks[boundary:]:
                    x = block(x, *context)
            prefix.update(key_value_prefix(cache, later, index))
        return prefix

    def run_from(h: Tensor, rows: Tensor | None = None) -> Tensor:
        x = stream[:, index + 1 :] if rows is None else stream[rows, index + 1 :]
        x = torch.cat([h[:, None], x], dim=1)  # [batch, pos from the site, d_model]: h at the site
        kept = later_keys_values()
        kept = kept if rows is None else {i: (k[rows], v[rows]) for i, (k, v) in kept.items()}
        return model.finish_from(x, boundary, index, kept)

    return stream[:, index], run_from
