"""Training data attribution: which training windows a prediction rests on.

A model trained on a finite set of windows is asked, for one test window, which training
windows lowered its loss there. Two answers, both as one score per (test, training window),
positive where the training window *helps* (removing it should raise the test loss):

- **TracIn** (Pruthi et al. 2020): replay training through its checkpoints and add up, at each,
  the learning rate times the dot product of the test window's loss gradient with the training
  window's, a first-order account of how much each step on that window lowered the test loss.
- **Influence functions** (Koh & Liang 2017): the change of the test loss when one training
  window is removed and the model retrained to convergence, to first order,
  ``g_test^T (G + damping I)^{-1} g_train / n``, with ``G`` the Gauss-Newton curvature of the
  training loss. EK-FAC (Grosse et al. 2023; the ``kronfluence`` package) approximates ``G``
  by Kronecker factors to scale to large models. The book's models are small enough to do
  without the approximation: ``G`` is estimated by its Monte Carlo form, the mean outer product
  of gradients whose targets are sampled from the model's own predictions (the Fisher, equal to
  the Gauss-Newton matrix for a softmax output), and inverted exactly through the Woodbury
  identity.

Both are checked against what they predict: ``retrain`` trains again from the same seed, on the
same batches in the same order, with chosen windows left out.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from resid.model import Config, Transformer, next_token_loss
from resid.runtime import provenance
from resid.train import LATER_MODEL_FIELDS, records, window_losses


@dataclass(frozen=True)
class Schedule:
    """How a small model trains on a fixed set of windows: AdamW, a constant learning rate,
    ``epochs`` passes in an order fixed by ``seed``, a checkpoint kept after each of
    ``checkpoint_epochs`` (TracIn replays training through them)."""

    model: Config
    epochs: int = 20
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.0
    seed: int = 0
    checkpoint_epochs: tuple[int, ...] = (5, 10, 15, 20)


@dataclass
class Trained:
    model: Transformer
    checkpoints: list[tuple[dict, float]]  # (state dict, learning rate) after each checkpoint epoch
    losses: list[float]  # training loss per step


def batch_order(n: int, schedule: Schedule, removed: Iterable[int] = ()) -> list[Tensor]:
    """The training windows of every step: each epoch a permutation of all ``n`` windows fixed by
    the seed, with the ``removed`` ones skipped, cut into batches. Leaving windows out keeps the
    others in the order they had, so a retrained model differs from the first by them alone (and
    by where the batch boundaries fall)."""
    gone = torch.zeros(n, dtype=torch.bool)
    gone[list(removed)] = True
    steps = []
    for epoch in range(schedule.epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(schedule.seed * 10_007 + epoch))
        order = order[~gone[order]]
        steps.extend(order.split(schedule.batch_size))
    return steps


def train_windows(windows: Tensor, schedule: Schedule, removed: Iterable[int] = ()) -> Trained:
    """Train a fresh model (initialised by ``schedule.seed``) on ``windows`` (``[n, n_ctx + 1]``
    byte tokens), leaving out the ``removed`` rows."""
    removed = list(removed)
    torch.manual_seed(schedule.seed)
    model = Transformer(schedule.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=schedule.lr, weight_decay=schedule.weight_decay)
    steps = batch_order(len(windows), schedule, removed)
    per_epoch = -(-(len(windows) - len(set(removed))) // schedule.batch_size)
    checkpoints, losses = [], []
    model.train()
    for step, rows in enumerate(steps):
        loss = next_token_loss(model(windows[rows, :-1]), windows[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % per_epoch == 0 and (step + 1) // per_epoch in schedule.checkpoint_epochs:
            checkpoints.append(({k: v.clone() for k, v in model.state_dict().items()}, schedule.lr))
    model.eval()
    return Trained(model, checkpoints, losses)


@torch.no_grad()
def window_loss(model: Transformer, windows: Tensor, last: int | None = None) -> Tensor:
    """Each window's mean next-token loss in nats (``[n]``), over its last ``last`` predictions
    only when given: ``resid.train.window_losses`` without the graph."""
    return window_losses(model, windows, last)


def gradients(
    model: Transformer, windows: Tensor, targets: Tensor | None = None, last: int | None = None
) -> Tensor:
    """The gradient of each window's mean next-token loss (over its last ``last`` predictions
    when given) with respect to every parameter, flattened: ``[n, n_parameters]``. ``targets``
    (``[n, pos]``) replaces the text's next tokens (say, tokens sampled from the model)."""
    params = [p for p in model.parameters() if p.requires_grad]
    targets = windows[:, 1:] if targets is None else targets
    keep = slice(-(last or targets.shape[1]), None)
    rows = []
    for i in range(len(windows)):
        logits = model(windows[i : i + 1, :-1])[0]  # [pos, vocab]
        loss = torch.nn.functional.cross_entropy(logits[keep], targets[i, keep])
        rows.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]))
    return torch.stack(rows)


def tracin(
    trained: Trained, train: Tensor, test: Tensor, last: int | None = None, chunk: int = 256
) -> Tensor:
    """TracIn-CP scores ``[test, train]``: over the checkpoints, the learning rate times the dot
    product of the test windows' loss gradients (over their last ``last`` predictions when
    given) and the training windows'. Positive: a step on that training window lowered that
    test window's loss."""
    model = Transformer(trained.model.cfg)
    scores = torch.zeros(len(test), len(train))
    for state, lr in trained.checkpoints:
        model.load_state_dict(state)
        test_grads = gradients(model, test, last=last)  # [test, P]
        for start in range(0, len(train), chunk):
            rows = slice(start, start + chunk)
            scores[:, rows] += lr * test_grads @ gradients(model, train[rows]).T
    return scores


def sampled_targets(model: Transformer, windows: Tensor, seed: int = 0) -> Tensor:
    """Next tokens drawn from the model's own predictions at every position (``[n, pos]``): the
    gradients with these as targets have the Fisher (Gauss-Newton) matrix as their mean outer
    product."""
    with torch.no_grad():
        probs = torch.softmax(model(windows[:, :-1]).double(), -1)  # [n, pos, vocab]
    generator = torch.Generator().manual_seed(seed)
    return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator).reshape(
        probs.shape[:-1]
    )


def influence(
    model: Transformer,
    train: Tensor,
    test: Tensor,
    last: int | None = None,
    damping: float = 0.1,
    seed: int = 0,
) -> Tensor:
    """Influence-function scores ``[test, train]``: ``n`` times the first-order rise of each test
    window's loss when one training window is removed (Koh & Liang's ``-I_up,loss``), with the
    damped Fisher ``F + d I`` as the curvature. ``F = J^T J / n`` is estimated from one
    sampled-target gradient per training window (the rows of ``J``) and inverted exactly by the
    Woodbury identity, ``(J^T J / n + d I)^{-1} v = (v - J^T (n d I + J J^T)^{-1} J v) / d``;
    ``d`` is ``damping`` times the mean of the estimate's nonzero eigenvalues (its trace over its
    rank, at most ``n``), so that it is free of scale; in the directions the ``n`` gradients do not
    span, the damping alone stands for the curvature. The test loss is over each test window's
    last ``last`` predictions when given."""
    n = len(train)
    fisher_rows = gradients(model, train, sampled_targets(model, train, seed))  # J: [n, P]
    d = damping * fisher_rows.pow(2).sum().item() / (n * min(n, fisher_rows.shape[1]))
    test_grads = gradients(model, test, last=last)  # [test, P]
    small = n * d * torch.eye(n, dtype=torch.float64) + (fisher_rows @ fisher_rows.T).double()  # [n, n]
    projected = (fisher_rows @ test_grads.T).double()  # [n, test]
    correction = fisher_rows.T @ torch.linalg.solve(small, projected).float()  # [P, test]
    solved = (test_grads.T - correction) / d  # [P, test]: (F + d I)^{-1} g_test
    return (gradients(model, train) @ solved).T  # [test, train]


def top_helpers(scores: Tensor, k: int) -> Tensor:
    """Per test window, the ``k`` training windows with the largest scores (``[test, k]``)."""
    return scores.topk(k, dim=-1).indices


def planted_recall(scores: Tensor, planted: Sequence[int]) -> Tensor:
    """Per test window, the share of the planted training windows among its top ``len(planted)``."""
    top = top_helpers(scores, len(planted))
    return torch.isin(top, torch.as_tensor(list(planted))).float().mean(-1)


def plant(windows: Tensor, text: bytes, rows: Sequence[int], seed: int = 0, at: int | None = None) -> Tensor:
    """A copy of ``windows`` with the bytes of ``text`` written into each of ``rows``, at a
    random offset (the artefact the attribution should find) or at offset ``at``."""
    planted = windows.clone()
    generator = torch.Generator().manual_seed(seed)
    length = len(text)
    if length >= windows.shape[1]:
        raise ValueError(
            f"the planted text ({length} bytes) must be shorter than a window ({windows.shape[1]})"
        )
    for row in rows:
        start = (
            int(torch.randint(0, windows.shape[1] - length + 1, (1,), generator=generator))
            if at is None
            else at
        )
        planted[row, start : start + length] = torch.tensor(list(text))
    return planted


def run_key(train: Tensor, schedule: Schedule, removed: Iterable[int] = ()) -> tuple[str, dict]:
    """A retraining run's record key and configuration: the schedule, a hash of the training
    windows and the removed rows (a set: their order does not change the run)."""
    fields = asdict(schedule)
    for name, default in LATER_MODEL_FIELDS.items():  # as training runs' keys leave them out, so
        if fields["model"][name] == default:  # that a model field added later keeps these records
            del fields["model"][name]
    config = {
        "kind": "tda retrain",
        "schedule": fields,
        "train_sha256_16": hashlib.sha256(records.fingerprint(train)).hexdigest()[:16],
        "n_train": len(train),
        "removed": sorted(set(removed)),
        "steps": len(batch_order(len(train), schedule, removed)),
    }
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()
    return f"tda-{digest[:16]}", config


def retrained_losses(
    train: Tensor, schedule: Schedule, removed: Sequence[int], test: Tensor, last: int | None = None
) -> Tensor:
    """Each test window's loss (``[test]``, nats) after training again from the same seed without
    the ``removed`` training windows. Read from the run's record where it holds this measurement
    (``resid.records``: committed beside the chapters, so a re-execution retrains nothing), else
    trained, and filed in the record where records are writable (the book's runner)."""
    key, config = run_key(train, schedule, removed)
    measured = records.measurement_id(window_loss, {"windows": test, "last": last})
    record = records.read(key)
    if record is not None and measured in record["measurements"]:
        provenance.record_build(f"training run {key}", record.get("seconds"), built_now=False)
        return records.decode(record["measurements"][measured])
    started = time.time()
    trained = train_windows(train, schedule, removed)
    losses = window_loss(trained.model, test, last)
    seconds = time.time() - started
    provenance.record_build(f"training run {key}", seconds, built_now=True)
    if record is None:  # the training loss every 20 steps is its history: enough to see it learn
        history = [{"step": step + 1, "train_loss": loss} for step, loss in enumerate(trained.losses)
                   if (step + 1) % 20 == 0 or step + 1 == len(trained.losses)]  # fmt: skip
        record = records.new(key, config, history, seconds, "cpu", provenance.machine())
    record["measurements"][measured] = records.encode(losses)
    records.write(record)
    return losses


def removal_effect(
    train: Tensor, schedule: Schedule, removed: Sequence[int], test: Tensor, last: int | None = None,
    reference: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """Retrain from the same seed without the ``removed`` training windows and return how much
    each test window's loss rose (``[test]``, nats), against ``reference``, the losses of the
    model trained on every window (computed when not given). The retrained losses come from the
    run's record where one holds them (``retrained_losses``)."""
    if reference is None:
        reference = window_loss(train_windows(train, schedule).model, test, last)
    return retrained_losses(train, schedule, removed, test, last) - reference
