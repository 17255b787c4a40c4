"""Execution plans: run a model's blocks in another order, skipped, repeated, or in parallel.

A plan is data: a tuple of steps, each naming the blocks it runs. A step of one block runs it
as usual; a step of several runs them all on the same input and averages their outputs
(Sun et al. 2024, "Transformer Layers as Painters"); ``loops`` feeds that average back in.
The paper's variants are small constructors below; ``run_plans`` runs many plans on one batch
and computes each shared prefix once.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from resid.model import Transformer


@dataclass(frozen=True)
class Step:
    layers: tuple[int, ...]
    loops: int = 1

    def __post_init__(self) -> None:
        if not self.layers or self.loops < 1:
            raise ValueError(f"a step needs at least one layer and loops >= 1, got {self}")


Plan = tuple[Step, ...]


def sequential(layers: list[int] | range) -> Plan:
    return tuple(Step((i,)) for i in layers)


def identity(n_layers: int) -> Plan:
    return sequential(range(n_layers))


def skip(n_layers: int, first: int, last: int) -> Plan:
    """Drop blocks ``first..last`` (inclusive)."""
    return sequential([i for i in range(n_layers) if not first <= i <= last])


def middle_repeat(n_layers: int, first: int, last: int) -> Plan:
    """Replace blocks ``first..last`` by as many runs of the centre block."""
    centre = (first + last) // 2
    return sequential([centre if first <= i <= last else i for i in range(n_layers)])


def reverse(n_layers: int, first: int, last: int) -> Plan:
    middle = list(range(first, last + 1))[::-1]
    return sequential(list(range(first)) + middle + list(range(last + 1, n_layers)))


def shuffle(n_layers: int, first: int, last: int, seed: int) -> Plan:
    middle = list(range(first, last + 1))
    random.Random(seed).shuffle(middle)
    return sequential(list(range(first)) + middle + list(range(last + 1, n_layers)))


def swap(n_layers: int, i: int) -> Plan:
    """Exchange blocks ``i`` and ``i + 1``."""
    order = list(range(n_layers))
    order[i], order[i + 1] = order[i + 1], order[i]
    return sequential(order)


def parallel(n_layers: int, first: int, last: int, loops: int = 1) -> Plan:
    """Blocks ``first..last`` all read the same input; their outputs are averaged (``loops`` times)."""
    head, tail = sequential(range(first)), sequential(range(last + 1, n_layers))
    return head + (Step(tuple(range(first, last + 1)), loops),) + tail


def apply_step(model: Transformer, x: Tensor, step: Step, context: tuple) -> Tensor:
    for _ in range(step.loops):
        if len(step.layers) == 1:
            x = model.blocks[step.layers[0]](x, *context)
        else:
            x = torch.stack([model.blocks[i](x, *context) for i in step.layers]).mean(0)
    return x


@torch.no_grad()
def run_plan(model: Transformer, tokens: Tensor, plan: Plan, attention_mask: Tensor | None = None) -> Tensor:
    """The model's output when its blocks execute as ``plan`` says."""
    return run_plans(model, tokens, [plan], attention_mask)[0]


@torch.no_grad()
def run_plans(
    model: Transformer,
    tokens: Tensor,
    plans: list[Plan],
    attention_mask: Tensor | None = None,
    readout: Callable[[Tensor], Any] | None = None,
) -> list[Any]:
    """Outputs of several plans on one batch, each distinct prefix of steps computed once.

    ``readout`` maps the final residual to what is kept (default: the model's logits); keeping
    only what is needed (a few positions' log-probs) keeps a sweep of many plans in memory.

    Plans are run in sorted order, so a plan's longest already-computed prefix is usually the
    previous plan's; only the residual states along that path are kept.
    """
    context = model.context(tokens.shape[1], attention_mask)
    embedded = model.embed_tokens(tokens)
    outputs: dict[int, Any] = {}
    path: list[tuple[Step, Tensor]] = []  # the steps of the last plan and the state after each
    # A looped step is its single pass repeated, so 3 loops extend the path of 2 loops.
    unrolled = [tuple(Step(s.layers) for s in plan for _ in range(s.loops)) for plan in plans]
    for index in sorted(range(len(plans)), key=lambda i: [s.layers for s in unrolled[i]]):
        plan = unrolled[index]
        shared = 0
        while shared < min(len(path), len(plan)) and path[shared][0] == plan[shared]:
            shared += 1
        del path[shared:]
        x = path[-1][1] if path else embedded
        for step in plan[shared:]:
            x = apply_step(model, x, step, context)
            path.append((step, x))
        outputs[index] = (readout or model.to_logits)(x)
    return [outputs[i] for i in range(len(plans))]


def paper_sweep(
    n_layers: int, n_grid: list[int], n_shuffles: int, seed: int = 0
) -> list[tuple[str, int, int, Plan]]:
    """Sun et al.'s variants for every N (layers kept intact at each end): ``(variant, N, seed, plan)``.

    Skip, middle repeat, reverse, parallel and looped parallel (3 loops) once each, and
    ``n_shuffles`` random orders.
    """
    sweep = []
    for n in n_grid:
        first, last = n, n_layers - n - 1
        sweep += [
            ("skip", n, 0, skip(n_layers, first, last)),
            ("middle repeat", n, 0, middle_repeat(n_layers, first, last)),
            ("reverse", n, 0, reverse(n_layers, first, last)),
            ("parallel", n, 0, parallel(n_layers, first, last)),
            ("looped parallel", n, 0, parallel(n_layers, first, last, loops=3)),
        ]
        sweep += [
            ("random order", n, s, shuffle(n_layers, first, last, seed=seed * 1000 + s))
            for s in range(n_shuffles)
        ]
    return sweep
