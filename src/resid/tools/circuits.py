"""Circuits of attention heads, the evidence for each head's role, and how good a circuit is
(Wang et al. 2023, the IOI circuit; the Primer, sections 4 and 5).

A circuit here is a set of heads (``Head(layer, head)``, which prints as ``L3H2``). The model
*runs the circuit* when every other head is mean-ablated: its output (``hook_z``) replaced, at
each position, by its mean over a reference distribution that carries no signal for the task
(for IOI, the ABC prompts, which name three different people). MLPs and the embedding are left
as they are. Scores are per prompt, so that every summary can carry a bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import torch
from torch import Tensor

from resid import stats
from resid.model import Transformer, hooks
from resid.model.basis import read, write
from resid.model.cache import Head, act_name
from resid.runtime import progress
from resid.stats.metrics import KLFromReference, LogitDiff, Metric

from . import attribution, heads
from .behaviours import ContrastSet


def all_heads(model: Transformer) -> list[Head]:
    return [Head(layer, h) for layer in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


@torch.no_grad()
def head_means(model: Transformer, reference: Tensor) -> list[Tensor]:
    """Each layer's head outputs averaged over the reference prompts, position by position:
    ``[pos, head, d_head]`` per layer (the prompts share one length)."""
    names = [act_name("z", i) for i in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(reference, names, logits_to_keep=1)
    return [cache[name].mean(0) for name in names]


@torch.no_grad()
def ablated_logit_diff(
    model: Transformer,
    prompts: ContrastSet,
    ablate: Iterable[Head],
    means: list[Tensor],
    metric: Metric | None = None,
) -> Tensor:
    """The logit difference (answer minus foil) of every prompt with the heads in ``ablate``
    mean-ablated: ``[prompt]``; or ``metric`` of the last position's logits, where given (any
    of ``metrics.py``'s, e.g. ``AnswerProbability(prompts.answers)``)."""
    logits = model.run_with_hooks(prompts.tokens, hooks.replace_heads(ablate, means), logits_to_keep=1)[:, -1]
    logits = logits.float()
    return (metric or LogitDiff(prompts.answers, prompts.foils))(logits)


def faithfulness(
    model: Transformer,
    prompts: ContrastSet,
    circuit: Iterable[Head],
    means: list[Tensor],
    seed: int = 0,
    metric: Metric | None = None,
) -> dict:
    """How much of the full model's logit difference (or ``metric``) the circuit alone recovers:
    F(C) / F(M), with a bootstrap interval over prompts (each resample's ratio of means)."""
    circuit = set(circuit)
    full = ablated_logit_diff(model, prompts, [], means, metric)
    outside = [h for h in all_heads(model) if h not in circuit]
    alone = ablated_logit_diff(model, prompts, outside, means, metric)
    ratio, low, high = stats.ratio_bootstrap(alone, full, seed=seed)
    return {
        "full model": full.mean().item(),
        "circuit": alone.mean().item(),
        "faithfulness": ratio,
        "low": low,
        "high": high,
    }


def completeness(
    model: Transformer,
    prompts: ContrastSet,
    circuit: Iterable[Head],
    means: list[Tensor],
    subsets: dict[str, Iterable[Head]],
    seed: int = 0,
    metric: Metric | None = None,
) -> pd.DataFrame:
    """For each named subset K of the circuit: F(C \\ K) against F(M \\ K), removing K from the
    circuit and from the whole model. A complete circuit loses as much as the model does; a
    large gap means the model has heads doing the task that the circuit lacks. The gap carries
    a bootstrap interval over prompts (paired: both are measured on the same prompts)."""
    circuit = set(circuit)
    outside = [h for h in all_heads(model) if h not in circuit]
    rows = []
    for name, subset in subsets.items():
        subset = set(subset)
        if not subset <= circuit:
            raise ValueError(f"subset {name!r} has heads outside the circuit: {sorted(subset - circuit)}")
        in_circuit = ablated_logit_diff(model, prompts, outside + sorted(subset), means, metric)
        in_model = ablated_logit_diff(model, prompts, sorted(subset), means, metric)
        gap, low, high = stats.bootstrap(in_circuit - in_model, seed=seed)
        rows.append(
            {
                "removed": name,
                "F(C \\ K)": in_circuit.mean().item(),
                "F(M \\ K)": in_model.mean().item(),
                "gap": gap.item(),
                "low": low.item(),
                "high": high.item(),
            }
        )
    return pd.DataFrame(rows)


def minimality(
    model: Transformer,
    prompts: ContrastSet,
    circuit: Iterable[Head],
    means: list[Tensor],
    seed: int = 0,
    metric: Metric | None = None,
) -> pd.DataFrame:
    """For each head v of the circuit, how much the circuit's logit difference (or ``metric``)
    falls when v is removed too: F(C) - F(C \\ {v}), with a paired bootstrap interval over
    prompts. A member whose interval includes zero is not needed on these prompts."""
    circuit = sorted(set(circuit))
    outside = [h for h in all_heads(model) if h not in set(circuit)]
    base = ablated_logit_diff(model, prompts, outside, means, metric)
    rows = []
    for head in circuit:
        drop, low, high = stats.bootstrap(
            base - ablated_logit_diff(model, prompts, outside + [head], means, metric), seed=seed
        )
        rows.append({"head": str(head), "drop": drop.item(), "low": low.item(), "high": high.item()})
    return pd.DataFrame(rows)


@torch.no_grad()
def prune_heads(
    model: Transformer,
    prompts: ContrastSet,
    means: list[Tensor],
    threshold: float,
    candidates: list[Head] | None = None,
    metric: Metric | None = None,
) -> tuple[list[Head], int]:
    """ACDC at the granularity of heads: visit heads from the last layer to the first and
    mean-ablate each for good if that raises KL(full model || circuit) at the last position by
    less than ``threshold``. One forward pass per head, where edge-level ACDC needs one per
    edge; ``candidates`` limits the search to some heads (the others are kept). ``metric``
    replaces KL: any per-prompt distance of the circuit's last-position logits from the full
    model's (e.g. the logit difference's absolute change). Returns the heads kept and the
    passes run."""
    reference = model(prompts.tokens, logits_to_keep=1)[:, -1]
    kl = metric or KLFromReference(reference)
    ablated: list[Head] = []
    current, passes = 0.0, 0
    order = [h for h in reversed(all_heads(model)) if candidates is None or h in set(candidates)]
    for head in progress.steps(order, "ACDC over heads"):
        ablation = hooks.replace_heads(ablated + [head], means)
        logits = model.run_with_hooks(prompts.tokens, ablation, logits_to_keep=1)[:, -1]
        trial = kl(logits).mean().item()
        passes += 1
        if trial - current < threshold:
            ablated.append(head)
            current = trial
    return [h for h in all_heads(model) if h not in set(ablated)], passes


# --- the evidence for a head's role in IOI ---


ATTENTION_ROLES = {  # (query, key) positions whose attention defines a role
    "end→IO": ("end", "IO"),  # name movers copy the indirect object
    "end→S1": ("end", "S1"),
    "end→S2": ("end", "S2"),  # S-inhibition heads
    "S2→S1": ("S2", "S1"),  # duplicate-token heads
    "S2→S1+1": ("S2", "S1+1"),  # induction heads
}


@torch.no_grad()
def ioi_attention_scores(model: Transformer, prompts: ContrastSet) -> dict[str, Tensor]:
    """Every head's attention between the positions that define the IOI roles (Wang et al.
    2023), per prompt: ``{"end→IO": [prompt, layer, head], ...}`` for the pairs in
    ``ATTENTION_ROLES``."""
    patterns = heads.attention_patterns(model, prompts.tokens).permute(1, 3, 4, 0, 2)
    rows_of, at = torch.arange(len(prompts)), prompts.positions  # patterns: [batch, query, key, layer, head]
    return {name: patterns[rows_of, at[q], at[k]] for name, (q, k) in ATTENTION_ROLES.items()}


def ioi_attention(model: Transformer, prompts: ContrastSet) -> pd.DataFrame:
    """``ioi_attention_scores`` averaged over prompts: a row per head."""
    scores = {name: values.mean(0) for name, values in ioi_attention_scores(model, prompts).items()}
    rows = []
    for layer, h in all_heads(model):
        row = {"head": str(Head(layer, h)), "layer": layer, "index": h}
        rows.append(row | {name: values[layer, h].item() for name, values in scores.items()})
    return pd.DataFrame(rows)


@torch.no_grad()
def copy_scores_in_context(
    model: Transformer, prompts: ContrastSet, candidates: list[Head], token_ids: Tensor
) -> pd.DataFrame:
    """Wang et al.'s copy score, taken in context: the residual stream at the IO position, as
    each head reads it at its own layer, sent through the head's OV circuit and read out
    through the unembedding. ``copying``: how often IO's logit is the highest among
    ``token_ids`` (the names); ``suppression``: how often it is the lowest (negative name
    movers). A row per candidate head."""
    layers = sorted({h.layer for h in candidates})
    _, cache = model.run_with_cache(
        prompts.tokens, [act_name("resid_pre", layer) for layer in layers], logits_to_keep=1
    )
    rows_of = torch.arange(len(prompts))
    io_rank = (token_ids[None, :] == prompts.answers[:, None]).float().argmax(1)  # IO's index among the names
    if not torch.isin(prompts.answers, token_ids).all():
        raise ValueError("every prompt's IO must be among token_ids")
    rows = []
    for head in candidates:
        block = model.blocks[head.layer]
        x = cache["resid_pre", head.layer][rows_of, prompts.positions["IO"]][:, None]  # [prompt, 1, d_model]
        written = write(
            block.attn.ov_write(read(block.ln1(x), block.R_attn_in))[:, 0, head.head], block.R_attn_out
        )
        logits = model.direction_logits(written, token_ids)  # [prompt, name]
        rows.append(
            {
                "head": str(head),
                "copying": (logits.argmax(1) == io_rank).float().mean().item(),
                "suppression": (logits.argmin(1) == io_rank).float().mean().item(),
            }
        )
    return pd.DataFrame(rows)


# The Primer's definitions of the IOI roles, as thresholds on a head's evidence (one rule for
# every chapter that names a role): attention from the end must prefer IO to S1 by this much,
# and the head's OV circuit must copy (or suppress) the attended name for this share of prompts.
ROLE_RULE = {"attention margin": 0.1, "copying share": 0.5}


def ioi_roles(evidence: pd.DataFrame) -> pd.Series:
    """The IOI role of each head from its evidence (columns ``end→IO``, ``end→S1``, ``end→S2``
    from ``ioi_attention``; ``copying``, ``suppression`` from ``copy_scores_in_context``, NaN
    where not measured; ``direct``, its direct effect on the logit difference): ``"name
    mover"`` (prefers IO from the end, copies it, raises the logit difference), ``"negative name
    mover"`` (prefers IO, suppresses it, lowers it), ``"S suppression"`` (looks at S2 more than
    IO, suppresses what it reads, raises it), or ``""``. Indexed like ``evidence``."""
    prefers_io = evidence["end→IO"] - evidence["end→S1"] >= ROLE_RULE["attention margin"]
    copies = evidence["copying"] >= ROLE_RULE["copying share"]  # NaN compares False: not measured
    suppresses = evidence["suppression"] >= ROLE_RULE["copying share"]
    raises, lowers = evidence["direct"] > 0, evidence["direct"] < 0
    looks_at_s2 = evidence["end→S2"] > evidence["end→IO"]
    roles = pd.Series("", index=evidence.index)
    roles[looks_at_s2 & suppresses & raises] = "S suppression"
    roles[prefers_io & suppresses & lowers] = "negative name mover"
    roles[prefers_io & copies & raises] = "name mover"
    return roles


@torch.no_grad()
def head_logit_attributions(
    model: Transformer, prompts: ContrastSet, ablate: Iterable[Head] = (), means: list[Tensor] | None = None
) -> Tensor:
    """Every head's direct contribution to the logit difference, per prompt, optionally with the
    heads in ``ablate`` mean-ablated: ``[prompt, layer, head]``."""
    with model.hooks(hooks.replace_heads(ablate, means) if means is not None else []):
        labels, contributions, _ = attribution.component_attributions(
            model, prompts.tokens, prompts.answers, prompts.foils
        )
    index = {name: i for i, name in enumerate(labels)}
    rows = [index[str(head)] for head in all_heads(model)]
    return contributions[rows].T.reshape(len(prompts), model.cfg.n_layers, model.cfg.n_heads)


def top_heads_signed(choosing: Tensor, k: int = 10) -> tuple[Tensor, Tensor]:
    """The ``k`` heads with the largest |mean| direct effect over the prompts of ``choosing``
    (``[prompt, head]``), and every head's sign there: what ``signed_share`` measures elsewhere."""
    mean = choosing.mean(0)
    return mean.abs().topk(k).indices, mean.sign()


def signed_share(measuring: Tensor, chosen: Tensor, signs: Tensor) -> float:
    """The ``chosen`` heads' share of all heads' direct effect over the prompts of ``measuring``
    (``[prompt, head]``), each head counted with its sign from the choosing prompts: a ratio of
    two sums over prompts. Unlike a share of |means|, a head that only adds noise adds nothing to
    the denominator on average, so the ratio's bias under resampling shrinks as 1 / prompts
    (a share of |means| stays biased upward however many prompts there are)."""
    signed = measuring * signs
    return (signed[:, chosen].sum() / signed.sum()).item()


def backup_heads(
    model: Transformer, prompts: ContrastSet, ablated: Iterable[Head], means: list[Tensor], seed: int = 0
) -> tuple[pd.DataFrame, dict]:
    """Self-repair (Wang et al.'s backup name movers; McGrath et al. 2023): each head's direct
    effect before and after the ``ablated`` heads are mean-ablated, with a paired bootstrap
    interval on the change; and, per prompt, the totals: the direct effect the ablated heads had,
    what the other heads gained, and the logit difference before and after."""
    ablated = list(ablated)
    before = head_logit_attributions(model, prompts)
    after = head_logit_attributions(model, prompts, ablated, means)
    change, low, high = stats.bootstrap(after - before, seed=seed)
    rows = []
    for layer, h in all_heads(model):
        rows.append(
            {
                "head": str(Head(layer, h)),
                "before": before[:, layer, h].mean().item(),
                "after": after[:, layer, h].mean().item(),
                "change": change[layer, h].item(),
                "low": low[layer, h].item(),
                "high": high[layer, h].item(),
                "ablated": (layer, h) in set(ablated),
            }
        )
    frame = pd.DataFrame(rows)
    is_ablated = torch.zeros(model.cfg.n_layers, model.cfg.n_heads, dtype=torch.bool)
    for layer, h in ablated:
        is_ablated[layer, h] = True
    totals = {  # per prompt, for intervals
        "direct effect of the ablated heads": before[:, is_ablated].sum(1),
        "gained by the other heads": (after - before)[:, ~is_ablated].sum(1),
        "logit difference before": ablated_logit_diff(model, prompts, [], means),
        "logit difference after": ablated_logit_diff(model, prompts, ablated, means),
    }
    return frame, totals
