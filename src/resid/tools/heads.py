"""What individual attention heads do: positional, subword-joiner and induction scores, OV and
QK circuits, copying, successor and copy-suppression heads, memory management, and the direct path.

Scores follow Olsson et al. (2022) and the Primer (Ferrando et al. 2024, section 5): on a
sequence of random tokens repeated once, a previous-token head attends from each position to
the one before, a duplicate-token head to the earlier copy of the current token, an induction
head to the token *after* that earlier copy (the one it will predict).
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import torch
from torch import Tensor

from resid.model import Transformer, hooks
from resid.model.basis import write
from resid.model.cache import Head, HeadLike, act_name
from resid.model.readouts import (  # noqa: F401  (re-exported: the heads' scores and losses read through them)
    attention_patterns,
    in_context_losses,
    next_token_losses,
    sequence_head_scores,
)


def repeated_tokens(
    n: int, length: int, token_pool: Tensor | int, seed: int = 0, prefix: Tensor | None = None
) -> Tensor:
    """``n`` sequences: an optional ``prefix`` (e.g. a BOS token), then ``length`` random tokens
    from ``token_pool`` (ids, or a vocabulary size), then the same ``length`` tokens again."""
    generator = torch.Generator().manual_seed(seed)
    pool = torch.arange(token_pool) if isinstance(token_pool, int) else token_pool
    segment = pool[torch.randint(0, len(pool), (n, length), generator=generator)]
    parts = [segment, segment]
    if prefix is not None:
        parts.insert(0, prefix.expand(n, -1))
    return torch.cat(parts, dim=1)


@torch.no_grad()
def head_scores(model: Transformer, tokens: Tensor, period: int, start: int | None = None) -> pd.DataFrame:
    """Previous-token, duplicate-token and induction scores of every head on ``tokens``, whose
    tokens from position ``start`` on (default: the last ``period``) repeat those ``period`` before.

    Each score is the mean attention weight on the key that defines the behaviour, over the
    query positions where that key exists (the repeat, for duplicate and induction).
    """
    by_sequence = sequence_head_scores(model, tokens, period, start)  # each [sequence, layer, head]
    scores = {name: value.mean(0) for name, value in by_sequence.items()}
    rows = [
        {"layer": layer, "head": head} | {name: value[layer, head].item() for name, value in scores.items()}
        for layer in range(model.cfg.n_layers)
        for head in range(model.cfg.n_heads)
    ]
    return pd.DataFrame(rows)


def positional_scores(patterns: Tensor) -> dict[str, Tensor]:
    """How much every head attends to a key at a fixed place relative to its query (the Primer's
    positional heads): ``self`` (the query's own position), ``previous`` (the one before),
    ``next`` (the one after: zero in a causal model) and ``first`` (position 0, where models park
    attention they do not need). Each is the mean attention weight on that key over queries 2
    onwards, where the four keys are distinct: ``{kind: [layer, head]}``. ``patterns``:
    ``[layer, batch, head, query, key]`` (``attention_patterns``)."""
    n = patterns.shape[-1]
    q = torch.arange(2, n)
    ahead = q[q < n - 1]
    return {
        "self": patterns[..., q, q].mean((1, -1)),
        "previous": patterns[..., q, q - 1].mean((1, -1)),
        "next": patterns[..., ahead, ahead + 1].mean((1, -1)) if len(ahead) else patterns.new_zeros(
            patterns.shape[0], patterns.shape[2]),
        "first": patterns[..., q, 0].mean((1, -1)),
    }  # fmt: skip


@torch.no_grad()
def relation_scores(model: Transformer, tokens: list[Tensor], related: Tensor, first: Tensor) -> Tensor:
    """The Primer's syntactic heads: for each sentence (``tokens``, one tensor each, lengths
    free), every head's attention weight from the last token on the ``related`` position, minus
    its mean weight on the other keys after ``first`` and before the query, the baseline of a
    head that attends regardless of the relation (the keys up to ``first`` hold the attention
    sinks, which no relation explains): ``[sentence, layer, head]``."""
    scores = []
    for ids, target, start in zip(tokens, related.tolist(), first.tolist(), strict=True):
        query = len(ids) - 1
        others = [k for k in range(start + 1, query) if k != target]
        if not start < target < query or not others:
            raise ValueError(f"position {target} must lie between {start} and {query}, among other keys")
        weights = attention_patterns(model, ids[None])[:, 0, :, query]  # [layer, head, key]
        scores.append(weights[..., target] - weights[..., others].mean(-1))
    return torch.stack(scores)


def rows_by_length(prompts: list[Tensor]) -> list[list[int]]:
    """The indices of ``prompts`` (1-D token tensors of any lengths) grouped by length, in order of
    first appearance: each group stacks into one batch, without padding."""
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        groups.setdefault(len(ids), []).append(i)
    return list(groups.values())


@torch.no_grad()
def last_position_logits(model: Transformer, prompts: list[Tensor], fwd_hooks=()) -> Tensor:
    """Each prompt's logits at its last position, ``[prompt, vocab]`` in float32, with the hooks
    ``fwd_hooks`` (e.g. an ablation from ``resid.hooks``) applied; prompts of one length run as
    one batch."""
    logits: list[Tensor | None] = [None] * len(prompts)
    for rows in rows_by_length(prompts):
        tokens = torch.stack([prompts[i] for i in rows])
        batch = model.run_with_hooks(tokens, list(fwd_hooks), logits_to_keep=1)
        for i, row in zip(rows, batch[:, -1].float(), strict=True):  # batch: [batch, 1, vocab]
            logits[i] = row
    return torch.stack(logits)


def answer_log_probs(logits: Tensor, answers: Tensor) -> Tensor:
    """Each row's log-probability of its answer: ``logits`` ``[prompt, vocab]``, ``answers``
    ``[prompt]`` token ids; returns ``[prompt]``."""
    return logits.float().log_softmax(-1).gather(1, answers[:, None])[:, 0]


@torch.no_grad()
def last_position_outputs(model: Transformer, tokens: list[Tensor], layers: list[int]) -> dict[int, Tensor]:
    """Each layer's head outputs (``hook_z``) at the last position, averaged over sentences of
    any lengths: ``{layer: [head, d_head]}``, the mean a mean ablation puts there."""
    names = [act_name("z", layer) for layer in sorted(set(layers))]
    sums: dict[int, Tensor] = {}
    for ids in tokens:
        _, cache = model.run_with_cache(ids[None], names, logits_to_keep=1)
        for layer in sorted(set(layers)):
            z = cache[act_name("z", layer)][0, -1].float()  # [head, d_head]
            sums[layer] = sums.get(layer, 0) + z
    return {layer: total / len(tokens) for layer, total in sums.items()}


def word_starts(tokenizer, tokens: Tensor) -> Tensor:
    """``[batch, pos]``, True where a token begins a word: a token continues the word before it
    when its text starts with a letter or digit and the previous token's text ends with one
    ("un" "believ" "able"); anything after a space, punctuation or the start begins a word."""
    texts = [[tokenizer.decode([i]) for i in row] for row in tokens.tolist()]
    starts = torch.ones(tokens.shape, dtype=torch.bool)
    for b, row in enumerate(texts):
        for p in range(1, len(row)):
            here, before = row[p], row[p - 1]
            starts[b, p] = not (here[:1].isalnum() and before[-1:].isalnum())
    return starts


def subword_joiner_scores(patterns: Tensor, starts: Tensor) -> Tensor:
    """The Primer's subword-joiner heads: for every head, the attention mass a token inside a
    word (not its first piece) puts on the earlier pieces of the same word, averaged over every
    such token: ``[layer, head]``. ``patterns``: ``[layer, batch, head, query, key]``;
    ``starts``: ``[batch, pos]`` from ``word_starts``."""
    word = starts.long().cumsum(1)  # [batch, pos]: which word each token belongs to
    n = starts.shape[1]
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)  # [query, key]: key strictly before
    same_word = (word[:, :, None] == word[:, None, :]) & earlier  # [batch, query, key]
    mass = (patterns * same_word[None, :, None].to(patterns.dtype)).sum(-1)  # [layer, batch, head, query]
    inside = ~starts  # [batch, query]
    if not inside.any():
        raise ValueError("no token continues a word: these sequences cannot score a subword joiner")
    return mass.permute(0, 2, 1, 3)[:, :, inside].mean(-1)


def joiner_index(patterns: Tensor, starts: Tensor) -> Tensor:
    """``subword_joiner_scores`` minus the attention each head puts on the previous token where
    a token *begins* a word: a previous-token head joins pieces of a word as a side effect and
    scores about 0 here; a head that reaches back within words, and only within words, scores
    up to 1. ``[layer, head]``."""
    first_pieces = starts.clone()
    first_pieces[:, 0] = False  # position 0 has no previous token
    if not first_pieces.any():
        raise ValueError("no token after the first begins a word")
    previous = patterns.diagonal(offset=-1, dim1=-2, dim2=-1)  # [layer, batch, head, query - 1]
    across = previous.permute(0, 2, 1, 3)[:, :, first_pieces[:, 1:]].mean(-1)
    return subword_joiner_scores(patterns, starts) - across


@torch.no_grad()
def successor_scores(model: Transformer, sequences: list[Tensor]) -> pd.DataFrame:
    """Successor heads (Gould et al. 2023): for every head, the fraction of ordinal tokens (one,
    two, three...; Monday, Tuesday...; each list in order) whose OV circuit, among all the
    lists' tokens, raises the next token of its own list most. ``[layer, head, successor]``; a
    head that copies what it attends to scores 0, chance is about one over the number of tokens."""
    ids = torch.cat(sequences)
    offsets = torch.tensor([0, *[len(s) for s in sequences]]).cumsum(0)
    rows = torch.cat(
        [torch.arange(start, end - 1) for start, end in zip(offsets[:-1], offsets[1:], strict=True)]
    )
    out = []
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            ov = ov_circuit(model, layer, head, ids)
            hits = (ov[rows].argmax(1) == rows + 1).float().mean().item()
            out.append({"layer": layer, "head": head, "successor": hits})
    return pd.DataFrame(out)


def norm_gains(model: Transformer, layer: int, sublayer: str = "attn") -> tuple[Tensor | None, Tensor | None]:
    """The per-coordinate gains around block ``layer``'s ``sublayer`` ("attn" or "mlp"): the
    input norm's (what a head or neuron reads is ``x / scale * gain``) and, in a sandwich-norm
    block (Gemma), the output norm's (what it writes is scaled by that gain before it is added).
    ``None`` where there is none. Their scales are positive numbers per position, which change
    no direction and no sign; the gains, per coordinate, change both."""
    block = model.blocks[layer]
    before = block.ln1 if sublayer == "attn" else block.ln2
    after = getattr(block, "ln1_post" if sublayer == "attn" else "ln2_post", None)

    def gain(norm) -> Tensor | None:
        weight = getattr(norm, "weight", None)
        return weight if weight is not None and weight.shape == (model.cfg.d_model,) else None

    return gain(before), gain(after)


def _post_gain(model: Transformer, layer: int, written: Tensor) -> Tensor:
    """A head's write as the residual receives it: through a sandwich norm's output gain."""
    after = norm_gains(model, layer)[1]
    return written if after is None else written * after


@torch.no_grad()
def ov_eigenvalue_signs(model: Transformer) -> pd.DataFrame:
    """For every head, ``sum(Re λ) / sum(|λ|)`` over the eigenvalues λ of its OV circuit as a
    map from the residual stream to the residual stream (``[d_model, d_model]``, with the input
    norm's gain and any output norm's gain folded in, as TransformerLens folds them): +1 for a
    head that writes back the direction it reads, -1 for one that writes its negative. A head
    attending to its own position with a negative sign erases what the stream holds there: the
    Primer's memory management."""
    rows = []
    W_V, W_O = model.W_V.double(), model.W_O.double()  # [layer, head, d_model, d_head], [.., d_head, d_model]
    for layer in range(model.cfg.n_layers):
        before, after = norm_gains(model, layer)
        # OV = W_V[h] @ W_O[h] has rank d_head, and its nonzero eigenvalues are those of
        # W_O[h] @ W_V[h], [d_head, d_head]: the same sums at a fraction of the cost
        reads, writes = W_V[layer], W_O[layer]
        if before is not None:
            reads = before.double()[:, None] * reads  # [head, d_model, d_head]
        if after is not None:
            writes = writes * after.double()  # [head, d_head, d_model]
        for head in range(model.cfg.n_heads):
            eigenvalues = torch.linalg.eigvals(writes[head] @ reads[head])
            sign = (eigenvalues.real.sum() / eigenvalues.abs().sum()).item()
            rows.append({"layer": layer, "head": head, "eigenvalue sign": sign})
    return pd.DataFrame(rows)


@torch.no_grad()
def mean_ablation(model: Transformer, tokens: Tensor, chosen: list[HeadLike]) -> list:
    """Hooks that replace the chosen heads' outputs (any spelling) by their mean over ``tokens``
    (``[batch, pos]``) at each position: sequences of that length or shorter can be ablated."""
    chosen = [Head.of(h) for h in chosen]
    names = sorted({act_name("z", layer) for layer, _ in chosen})
    _, cache = model.run_with_cache(tokens, names, logits_to_keep=1)
    means = {layer: cache[act_name("z", layer)].mean(0) for layer, _ in chosen}  # [pos, head, d_head]
    return hooks.replace_heads(chosen, means)


@torch.no_grad()
def output_means(
    model: Transformer, tokens: Tensor, layers: Iterable[int] | None = None
) -> dict[int, Tensor]:
    """Each layer's head outputs (``hook_z``) averaged over every sequence and position of
    ``tokens``: ``{layer: [head, d_head]}``, for ``layers`` (default: all), from one pass."""
    layers = range(model.cfg.n_layers) if layers is None else sorted(set(layers))
    _, cache = model.run_with_cache(tokens, [act_name("z", layer) for layer in layers], logits_to_keep=1)
    return {layer: cache[act_name("z", layer)].mean((0, 1)) for layer in layers}


@torch.no_grad()
def ablated_in_context_losses(
    model: Transformer,
    tokens: Tensor,
    chosen: list[HeadLike],
    start: int,
    means: dict[int, Tensor] | None = None,
) -> Tensor:
    """Each sequence's mean loss from position ``start`` on with the ``chosen`` heads' outputs
    (any spelling) replaced by their mean over every sequence and position: ``[batch]`` (the
    repeat's loss of ``in_context_losses(..., per_prompt=True)``, ablated). ``means``:
    ``output_means(model, tokens)``, where the caller ablates several sets on the same tokens."""
    chosen = [Head.of(h) for h in chosen]
    if means is None:
        means = output_means(model, tokens, [layer for layer, _ in chosen])
    return next_token_losses(model, tokens, hooks.replace_heads(chosen, means), start=start).mean(1)


def _normalised_embeddings(model: Transformer, layer: int, token_ids: Tensor) -> Tensor:
    """Token embeddings as a layer-``layer`` attention head reads them (its input norm applied),
    in the residual basis that the model's per-head weights act on."""
    return model.blocks[layer].ln1(model.embed.weight[token_ids])


@torch.no_grad()
def ov_circuit(model: Transformer, layer: int, head: int, token_ids: Tensor) -> Tensor:
    """The full OV circuit ``W_E W_OV W_U`` restricted to ``token_ids``: entry [i, j] is how much
    attending to token i raises the logit of token j. ``[n, n]``."""
    read_in = _normalised_embeddings(model, layer, token_ids)  # [n, d_model]
    written = _post_gain(model, layer, read_in @ model.OV(layer, head))
    return model.direction_logits(written, token_ids).float()


@torch.no_grad()
def qk_circuit(model: Transformer, layer: int, head: int, token_ids: Tensor) -> Tensor:
    """The token-token QK circuit ``W_E W_QK W_E^T`` on ``token_ids`` (query rows, key columns),
    scaled like the attention scores; positions are left out (with rotary embeddings this is
    the score between a query and a key at the same position)."""
    x = _normalised_embeddings(model, layer, token_ids)
    return (x @ model.QK(layer, head) @ x.T / model.cfg.head_dim**0.5).float()


@torch.no_grad()
def copy_scores(model: Transformer, token_ids: Tensor) -> pd.DataFrame:
    """For every head, how its OV circuit treats the token it attends to, over ``token_ids``:
    ``copying``, the fraction of tokens whose own logit is the largest in their row (the head
    promotes what it attends to), and ``suppression``, the fraction whose own logit is the
    smallest (it demotes it: copy suppression, McDougall et al. 2023). ``self`` is the mean
    diagonal entry relative to its row (in row standard deviations)."""
    rows = []
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            ov = ov_circuit(model, layer, head, token_ids)
            diagonal, diagonal_index = ov.diagonal(), torch.arange(len(ov), device=ov.device)
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "copying": (ov.argmax(1) == diagonal_index).float().mean().item(),
                    "suppression": (ov.argmin(1) == diagonal_index).float().mean().item(),
                    "self": ((diagonal - ov.mean(1)) / ov.std(1)).mean().item(),
                }
            )
    return pd.DataFrame(rows)


@torch.no_grad()
def attended_token_effect(
    model: Transformer, tokens: Tensor, layer: int, head: int, per_prompt: bool = False
) -> dict:
    """What a head does to the token it attends to most, measured by mean-ablating it.

    At every query position, the head's strongest key holds some token t; the function returns
    the head's direct effect on t's logit (mean over positions where t is not the token at the
    query itself) and the change in t's logit when the head's output is replaced by its mean
    over every sequence and position. A copy-suppression head lowers t directly, so ablating it
    raises t's logit. ``per_prompt``: both effects as ``[batch]`` tensors, each sequence's mean
    over its own positions (for intervals over sequences).
    """
    name_z, name_p = act_name("z", layer), act_name("pattern", layer)
    logits, cache = model.run_with_cache(tokens, [name_z, name_p])
    attended = tokens.gather(1, cache[name_p][:, head].argmax(-1))  # [batch, query]
    keep = attended != tokens
    mean_z = cache[name_z].mean((0, 1))  # [head, d_head]: every head's mean output
    ablated = model.run_with_hooks(tokens, hooks.replace_heads([(layer, head)], {layer: mean_z}))
    block = model.blocks[layer]
    written = write(block.attn.head_results(cache[name_z])[:, :, head], block.R_attn_out)
    direct = model.direction_logits(written)
    pick = attended.unsqueeze(-1)
    effects = {
        "direct effect on attended token": direct.gather(-1, pick).squeeze(-1).float(),
        "logit change when ablated": (ablated.gather(-1, pick) - logits.gather(-1, pick)).squeeze(-1).float(),
    }  # each [batch, query]
    kept = keep.sum(1)  # [batch]
    by_sequence = {name: (value * keep).sum(1) / kept for name, value in effects.items()}
    by_sequence["positions"] = kept
    return by_sequence if per_prompt else pooled_effects(by_sequence)


def pooled_effects(by_sequence: dict[str, Tensor]) -> dict:
    """``attended_token_effect``'s per-sequence effects (``per_prompt=True``) as its means over
    every counted position: each sequence weighted by its ``positions``."""
    positions = by_sequence["positions"]
    means = {name: ((value.nan_to_num() * positions).sum() / positions.sum()).item()  # nan: no position
             for name, value in by_sequence.items() if name != "positions"}  # fmt: skip
    return means | {"positions": int(positions.sum())}


@torch.no_grad()
def direct_path_logits(model: Transformer, token_ids: Tensor) -> Tensor:
    """Next-token logits from the embedding alone, every block skipped (the direct path, which
    the Primer describes as the model's bigram statistics): ``[n, vocab]``."""
    x = model.embed_tokens(token_ids[:, None])
    return model.to_logits(x)[:, 0].float()


def bigram_log_probs(ids: Tensor, vocab_size: int, rows: Tensor, smoothing: float = 1.0) -> Tensor:
    """Log P(next | current) counted over a token stream for the current tokens ``rows``,
    add-``smoothing``: ``[len(rows), vocab]`` (a full table of a 49k vocabulary would not fit)."""
    row_of = torch.full((vocab_size,), -1, dtype=torch.long)
    row_of[rows] = torch.arange(len(rows))
    current, following = row_of[ids[:-1]], ids[1:]
    wanted = current >= 0
    counts = torch.full((len(rows), vocab_size), smoothing)
    counts.view(-1).index_add_(
        0, current[wanted] * vocab_size + following[wanted], torch.ones(int(wanted.sum()))
    )
    return (counts / counts.sum(1, keepdim=True)).log()


@torch.no_grad()
def bigram_hits_without_copying(
    model: Transformer, ids: Tensor, rows: Tensor, chunk: int = 64
) -> tuple[Tensor, Tensor]:
    """Does the direct path predict bigrams, copying aside? For each current token in ``rows``:
    whether the direct path's top next token *other than the current one* is a most frequent
    follower of it in the token stream ``ids`` (also other than itself), and whether the most
    frequent token of ``ids`` other than it is (the unigram baseline). ``([n], [n])``, bool.
    With tied embeddings the direct path's top is nearly always the current token: leaving it
    out of every ranking separates copying from bigram statistics."""
    unigram = torch.bincount(ids, minlength=model.cfg.vocab_size).float()
    direct_hits, baseline_hits = [], []
    for start in range(0, len(rows), chunk):
        current = rows[start : start + chunk]
        n = torch.arange(len(current))
        logits = direct_path_logits(model, current)  # [n, vocab]
        followers = bigram_log_probs(ids, logits.shape[1], current, smoothing=0.0)  # [n, vocab]
        frequency = unigram[: logits.shape[1]].expand_as(logits).clone()
        for table in (logits, followers, frequency):
            table[n, current] = -torch.inf  # the current token is never a prediction here
        best = followers.max(-1).values  # ties: any most frequent follower is a hit
        direct_hits.append(followers[n, logits.argmax(-1)] == best)
        baseline_hits.append(followers[n, frequency.argmax(-1)] == best)
    return torch.cat(direct_hits), torch.cat(baseline_hits)
