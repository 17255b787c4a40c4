"""Feed-forward neurons as keys and values (Geva et al. 2021, 2022; the Primer, section 5.2).

A neuron of an MLP reads the residual stream with its input weights (the *key*: which contexts
make it fire) and, when it fires, adds its column of ``W_out`` to the residual (the *value*:
read through the unembedding, which tokens it promotes and which it suppresses). The
activation is what ``blocks.{l}.mlp.hook_post`` holds: ``gelu(W_in x)``, or ``silu(W_gate x) *
W_in x`` for SwiGLU models.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor

from resid.model import Transformer, hooks
from resid.model.basis import read, write
from resid.model.cache import act_name
from resid.runtime import progress
from resid.stats.metrics import Metric

from .heads import norm_gains, rows_by_length


def value_logits(model: Transformer, layer: int, neurons: Tensor | None = None) -> Tensor:
    """Each neuron's value vector read through the unembedding: ``[neuron, vocab]``, the logits
    one unit of its activation adds (through the final norm's gain, not its scale)."""
    block = model.blocks[layer]
    values = block.mlp.W_out.weight.T  # [d_mlp, d_model]: row n is what neuron n writes per unit
    if neurons is not None:
        values = values[neurons]
    with torch.no_grad():
        return model.direction_logits(write(values, block.R_mlp_out)).float()


@torch.no_grad()
def in_out_cosines(model: Transformer, layer: int) -> Tensor:
    """Each neuron's input direction (the direction that makes it fire: its row of ``W_in``,
    of ``W_gate`` in a gated MLP, times the norm's per-channel gain where there is one) against
    its output direction (its column of ``W_out``, times the output norm's gain in a sandwich-norm
    block), both in the residual basis: ``[neuron]``
    cosines. A large negative cosine marks a neuron that removes from the stream what made it
    fire: the Primer's memory management."""
    block = model.blocks[layer]
    firing = block.mlp.W_in if block.mlp.W_gate is None else block.mlp.W_gate
    inputs = write(firing.weight, block.R_mlp_in)  # [d_mlp, d_model]
    outputs = write(block.mlp.W_out.weight.T, block.R_mlp_out)  # [d_mlp, d_model]
    before, after = norm_gains(model, layer, "mlp")  # a sandwich norm's output gain, in Gemma
    if before is not None:
        inputs = inputs * before
    if after is not None:
        outputs = outputs * after
    return torch.nn.functional.cosine_similarity(inputs.float(), outputs.float(), dim=-1)


def position_shares(acts: Tensor, first: int = 2) -> Tensor:
    """How much of each neuron's activation its position explains (the Primer's neurons that
    fire over a range of positions): the variance of its mean activation at each position over
    the variance of its activation (eta squared), over positions ``first`` onwards. ``acts``:
    ``[window, pos, neuron]`` (``blocks.{l}.mlp.hook_post``) -> ``[neuron]`` in [0, 1]; a neuron
    that ignores position scores about (positions - 1) / (values - 1)."""
    x = acts[:, first:].float()  # [window, pos, neuron]
    total = x.flatten(0, 1).var(0, unbiased=False)
    between = x.mean(0).var(0, unbiased=False)  # every position has the same number of windows
    return torch.where(total > 0, between / total.clamp_min(1e-30), torch.zeros_like(total))


def promoted_tokens(model: Transformer, layer: int, neuron: int, k: int = 10) -> pd.DataFrame:
    """The ``k`` tokens a neuron's value vector promotes most and the ``k`` it suppresses most."""
    logits = value_logits(model, layer, torch.tensor([neuron]))[0]
    top, bottom = logits.topk(k), (-logits).topk(k)
    decode = _decoder(model)
    return pd.DataFrame(
        {
            "promotes": [decode([i]) for i in top.indices.tolist()],
            "logit +": top.values.tolist(),
            "suppresses": [decode([i]) for i in bottom.indices.tolist()],
            "logit -": (-bottom.values).tolist(),
        }
    )


def standardised_value_logits(
    model: Transformer, layer: int, token_ids: Tensor, neurons: Tensor | None = None
) -> Tensor:
    """Each neuron's value logits for ``token_ids`` in units of its own spread over the
    vocabulary: (logit - its mean over the vocabulary) / its standard deviation there,
    ``[neuron, token]``. A neuron that writes "one of these tokens comes next" gives them large
    positive values; one that suppresses them, large negative ones."""
    logits = value_logits(model, layer, neurons)
    return (logits[:, token_ids] - logits.mean(1, keepdim=True)) / logits.std(1, keepdim=True)


def class_promotion(model: Transformer, layer: int, token_ids: Tensor) -> Tensor:
    """How much each neuron of ``layer`` promotes a class of tokens (say, city names): the mean
    of ``standardised_value_logits`` over the class. ``[d_mlp]``; large means a neuron that
    writes "one of these tokens comes next"."""
    return standardised_value_logits(model, layer, token_ids).mean(1)


@torch.no_grad()
def top_activations(
    model: Transformer, tokens: Tensor, layer: int, neurons: list[int], k: int = 8, batch_size: int = 8
) -> pd.DataFrame:
    """The ``k`` positions of ``tokens`` (``[sequence, pos]``) where each neuron fires most: one
    row per (neuron, rank) with the activation, where it was, and the context up to that token
    (the token itself in brackets) when the model has a tokenizer."""
    name = act_name("post", layer)
    index = torch.tensor(neurons)
    best_values = torch.full((len(neurons), k), -torch.inf)
    best_places = torch.zeros(len(neurons), k, dtype=torch.long)  # flattened sequence * pos + position
    starts = range(0, len(tokens), batch_size)
    for start in progress.steps(starts, f"neuron activations, layer {layer}", show=len(starts) > 4):
        batch = tokens[start : start + batch_size]
        _, cache = model.run_with_cache(batch, [name], logits_to_keep=1)
        acts = cache[name][..., index].float().flatten(0, 1).T  # [neuron, batch * pos]
        places = torch.arange(acts.shape[1]) + start * tokens.shape[1]
        values = torch.cat([best_values, acts], 1)
        order = values.topk(k, dim=1)
        best_values = order.values
        best_places = torch.cat([best_places, places.expand(len(neurons), -1)], 1).gather(1, order.indices)
    decode = _decoder(model)
    rows = []
    for i, neuron in enumerate(neurons):
        for rank in range(k):
            sequence, position = divmod(best_places[i, rank].item(), tokens.shape[1])
            context = tokens[sequence, max(0, position - 8) : position].tolist()
            rows.append(
                {
                    "neuron": neuron,
                    "rank": rank,
                    "activation": best_values[i, rank].item(),
                    "sequence": sequence,
                    "position": position,
                    "context": decode(context) + "[" + decode([tokens[sequence, position].item()]) + "]",
                }
            )
    return pd.DataFrame(rows)


@torch.no_grad()
def neuron_effects(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor,
    layer: int,
    neurons: list[int],
    metric: Metric,
    direction: Tensor,
) -> tuple[Tensor, Tensor]:
    """The direct and the total effect of each neuron on a task, per prompt: ``([neuron,
    prompt], [neuron, prompt])``, each the change when the neuron's activation takes its value
    on the counterfactual prompt (negative: the neuron supported the clean answer).

    Total effect: the change in ``metric`` when the neuron's activation (at every position) is
    patched. Direct effect: the part that goes straight to the logits, the activation's change
    at the last position times the neuron's value vector, through the final norm frozen at the
    clean run's scale, onto ``direction`` (``[batch, d_model]`` in the unembedding's space,
    e.g. ``W_U[answer] - W_U[foil]``). For a logit-difference metric the two are in the same
    units; their gap is what the neuron does through later layers.
    """
    if model.cfg.post_norm or model.unembed is None:
        raise ValueError("neuron effects are defined for pre-norm language models")
    name, final = act_name("post", layer), model.resid_names()[-1]
    clean_logits, clean_cache = model.run_with_cache(clean, [name, final])
    _, counter_cache = model.run_with_cache(counterfactual, [name])
    base = metric(clean_logits[:, -1])
    scale = model.ln_final.scale(clean_cache[final][:, -1])  # [batch, 1]
    block = model.blocks[layer]
    direct, total = [], []
    for neuron in progress.steps(neurons, f"neuron patching, layer {layer}", show=len(neurons) > 20):
        patching = hooks.replace_coordinates(name, [neuron], counter_cache[name])
        patched = model.run_with_hooks(clean, patching, logits_to_keep=1)
        total.append(metric(patched[:, -1]) - base)
        change = counter_cache[name][:, -1, neuron] - clean_cache[name][:, -1, neuron]  # [batch]
        written = write(change[:, None] * block.mlp.W_out.weight[:, neuron], block.R_mlp_out)
        normed = read(model.ln_final.linear(written, scale), model.R_unembed)
        direct.append((normed.float() * direction.float()).sum(-1))
    return torch.stack(direct), torch.stack(total)


@torch.no_grad()
def class_scores(model: Transformer, classes: dict[str, Tensor]) -> dict[str, Tensor]:
    """``class_promotion`` of every neuron of every layer for each class of token ids:
    ``{class: [layer, neuron]}``. Each value vector's logits are computed for the classes' tokens
    only; its mean and spread over the vocabulary come from the unembedding's moments
    (``Transformer.direction_logit_spread``), equal to ``standardised_value_logits``' to about
    1e-6 of a standard deviation, without the vocabulary's logits of every neuron."""
    every = torch.cat(list(classes.values()))
    values = torch.stack([  # [layer, d_mlp, d_model]: what each neuron writes per unit
        write(block.mlp.W_out.weight.T, block.R_mlp_out) for block in model.blocks
    ])  # fmt: skip
    mean, std = model.direction_logit_spread(values)  # [layer, d_mlp] each
    z = (model.direction_logits(values, every).float() - mean[..., None]) / std[..., None]
    parts = z.split([len(ids) for ids in classes.values()], dim=-1)  # [layer, neuron, token] each
    return {name: part.mean(-1) for name, part in zip(classes, parts, strict=True)}


@torch.no_grad()
def mean_activations(
    model: Transformer, tokens: Tensor, layers: list[int], first: int = 2
) -> dict[int, Tensor]:
    """Each neuron's mean activation over ``tokens`` (``[batch, pos]``), positions ``first``
    onwards: ``{layer: [d_mlp]}``, what a mean ablation writes."""
    layers = sorted(set(layers))
    _, cache = model.run_with_cache(tokens, [act_name("post", layer) for layer in layers], logits_to_keep=1)
    return {layer: cache[act_name("post", layer)][:, first:].float().mean((0, 1)) for layer in layers}


@torch.no_grad()
def activations_at(model: Transformer, tokens: Tensor, position: int = -1, batch_size: int = 32) -> Tensor:
    """Every neuron of every layer (``blocks.{l}.mlp.hook_post``) at one ``position`` of each row
    of ``tokens`` (``[batch, pos]``): ``[batch, layer, d_mlp]`` in float32. Only that position
    is kept, so a long batch costs no more memory than its forward pass."""
    names = [act_name("post", layer) for layer in range(model.cfg.n_layers)]
    kept: dict[str, list[Tensor]] = {name: [] for name in names}

    def keep(x: Tensor, hook_point) -> None:
        kept[hook_point.name].append(x[:, position].float())  # [batch, d_mlp]

    for start in range(0, len(tokens), batch_size):
        model.run_with_hooks(tokens[start : start + batch_size], [(name, keep) for name in names])
    return torch.stack([torch.cat(kept[name]) for name in names], dim=1)  # [batch, layer, d_mlp]


@torch.no_grad()
def ablation_effects(
    model: Transformer,
    prompts: list[Tensor],
    answers: Tensor,
    chosen: list[tuple[int, int]],
    means: dict[int, Tensor],
) -> tuple[Tensor, Tensor]:
    """The direct and the total effect of mean-ablating the ``chosen`` neurons (layer, neuron)
    together, on each prompt's answer logit minus the mean logit over the vocabulary at its last
    position: ``([prompt], [prompt])``, negative where the neurons supported the answer.

    Total effect: the change when every chosen activation is replaced by ``means[layer]`` at
    every position and the whole model runs. Direct effect: the part written straight into the
    last position's logits, the activations' change there times the neurons' value vectors,
    through the sublayer's output norm (Gemma's sandwich) and the final norm, each frozen at its
    clean run's scale. With those scales frozen, a last layer's neurons have one effect only.
    """
    if model.cfg.post_norm or model.unembed is None:
        raise ValueError("ablation effects are defined for pre-norm language models")
    by_layer: dict[int, list[int]] = {}
    for layer, neuron in chosen:
        by_layer.setdefault(layer, []).append(neuron)
    ablation = []
    for layer, index in by_layer.items():
        ablation += hooks.replace_coordinates(act_name("post", layer), index, means[layer])
    final = model.resid_names()[-1]
    names = [act_name("post", layer) for layer in by_layer] + [final]
    unembed = model.unembed.weight.float()  # [vocab, d_model]
    mean_row = unembed.mean(0)
    direct, total = torch.empty(len(prompts)), torch.empty(len(prompts))
    for rows in rows_by_length(prompts):  # prompts of one length run as one batch
        tokens, answer = torch.stack([prompts[i] for i in rows]), answers[rows]  # [batch, pos], [batch]
        clean, cache = model.run_with_cache(tokens, names, logits_to_keep=1)
        ablated = model.run_with_hooks(tokens, ablation, logits_to_keep=1)
        centred = [
            logits[:, -1].float().gather(1, answer[:, None])[:, 0] - logits[:, -1].float().mean(-1)
            for logits in (clean, ablated)
        ]
        total[rows] = centred[1] - centred[0]
        written = 0
        for layer, index in by_layer.items():
            block = model.blocks[layer]
            acts = cache[act_name("post", layer)][:, -1]  # [batch, d_mlp]
            change = torch.zeros_like(acts)
            change[:, index] = means[layer][index].to(acts.dtype) - acts[:, index]
            out = write(change @ block.mlp.W_out.weight.T, block.R_mlp_out)  # [batch, d_model]; no bias
            if getattr(block, "ln2_post", None) is not None:
                whole = write(block.mlp.W_out(acts), block.R_mlp_out)
                out = block.ln2_post.linear(out, block.ln2_post.scale(whole))
            written = written + out
        scale = model.ln_final.scale(cache[final][:, -1])
        normed = read(model.ln_final.linear(written, scale), model.R_unembed)  # [batch, d_model]
        direct[rows] = (normed.float() * (unembed[answer] - mean_row)).sum(-1)
    return direct, total


@torch.no_grad()
def early_activations(model: Transformer, tokens: Tensor, layer: int = 0, batch_size: int = 16) -> Tensor:
    """Every neuron's activation (``blocks.{layer}.mlp.hook_post``) at every position of
    ``tokens`` (``[sequence, pos]``), running only the blocks up to ``layer``: ``[sequence, pos,
    d_mlp]``. Early neurons over a whole text cost a fraction of the forward pass."""
    name, captured, chunks = act_name("post", layer), [], []

    def keep(acts: Tensor, hook_point) -> None:
        captured.append(acts.float())

    starts = range(0, len(tokens), batch_size)
    with model.hooks([(name, keep)]):
        for start in progress.steps(starts, f"neuron activations, blocks 0-{layer}", show=len(starts) > 8):
            batch = tokens[start : start + batch_size]
            x = model.embed_tokens(batch)
            rope, mask = model.context(batch.shape[1])
            for block in model.blocks[: layer + 1]:
                x = block(x, rope, mask)
            chunks.append(captured.pop())
    return torch.cat(chunks)


def ngram_ids(tokens: Tensor, vocab_size: int) -> tuple[Tensor, Tensor]:
    """Each position's unigram (the token) and bigram (the previous token and this one) as one
    id each, the bigrams numbered after every unigram: ``([sequence, pos], [sequence, pos])``
    (position 0 has no bigram: -1)."""
    bigrams = torch.full_like(tokens, -1)
    bigrams[:, 1:] = vocab_size + tokens[:, :-1] * vocab_size + tokens[:, 1:]
    return tokens.clone(), bigrams


def ngram_triggers(
    ids: Tensor, fires: Tensor, min_count: int = 3, min_rate: float = 0.5
) -> tuple[Tensor, Tensor]:
    """The n-grams that make each neuron fire (Voita et al. 2023): among the n-gram ids
    occurring at least ``min_count`` times (``ids``, ``[position]``; -1 for none), those at
    whose occurrences a neuron fires (``fires``, ``[position, neuron]``) at least ``min_rate``
    of the time. Returns the n-grams counted (sorted ids, ``[ngram]``) and the trigger mask
    ``[ngram, neuron]``."""
    present = ids >= 0
    unique, inverse, counts = ids[present].unique(return_inverse=True, return_counts=True)
    frequent = counts >= min_count
    rates = torch.zeros(len(unique), fires.shape[1]).index_add_(0, inverse, fires[present].float())
    rates /= counts[:, None]
    return unique[frequent], rates[frequent] >= min_rate


def _lookup(ngrams: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
    """Where each of ``ids`` sits among the sorted ``ngrams``, and whether it is there at all."""
    if not len(ngrams):
        return torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.bool)
    where = torch.searchsorted(ngrams, ids.clamp_min(0)).clamp_max(len(ngrams) - 1)
    return where, (ngrams[where] == ids) & (ids >= 0)


def at_trigger(ids: Tensor, ngrams: Tensor, triggers: Tensor) -> Tensor:
    """``[position, neuron]``: whether the n-gram at each position (``ids``, ``[position]``) is
    one of the neuron's triggers (``ngrams``, ``triggers`` from ``ngram_triggers``)."""
    where, known = _lookup(ngrams, ids)
    hit = torch.zeros(len(ids), triggers.shape[1], dtype=torch.bool)
    hit[known] = triggers[where[known]]
    return hit


def ngram_rates(ids: Tensor, fires: Tensor, ngrams: Tensor) -> tuple[Tensor, Tensor]:
    """For each of ``ngrams`` (sorted ids), how often it occurs among ``ids`` (``[position]``)
    and at what rate each neuron fires there: ``([ngram], [ngram, neuron])``."""
    where, known = _lookup(ngrams, ids)
    counts = torch.zeros(len(ngrams)).index_add_(0, where[known], torch.ones(int(known.sum())))
    sums = torch.zeros(len(ngrams), fires.shape[1]).index_add_(0, where[known], fires[known].float())
    return counts, sums / counts.clamp_min(1)[:, None]


def trigger_analysis(
    tokens_a: Tensor, fires_a: Tensor, tokens_b: Tensor, fires_b: Tensor, vocab_size: int, skip: int = 2,
    min_count: int = 3, min_rate: float = 0.5,
) -> dict[str, Tensor]:  # fmt: skip
    """N-gram detectors (the Primer, section 5.2), found on one text and tested on another.

    ``tokens_*``: ``[window, pos]``; ``fires_*``: ``[window, pos, neuron]`` (bool), where each
    neuron fires; each window's first ``skip`` positions are left out. A neuron's *triggers* are
    the unigrams and bigrams of split A that occur at least ``min_count`` times and make it fire
    at least ``min_rate`` of the time (``ngram_triggers``). Returns, per window of B and neuron,
    ``"firings"`` (how often it fires) and ``"at_trigger"`` (how many of those at one of its
    triggers from A); and per neuron, ``"confirmed_tokens"``: how many distinct tokens end a
    trigger that B confirms (at least two occurrences there, firing at least ``min_rate``)."""
    n_neurons = fires_a.shape[-1]

    def flat(tokens: Tensor, fires: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        unigrams, bigrams = ngram_ids(tokens, vocab_size)
        unigrams[:, :skip], bigrams[:, :skip] = -1, -1
        return unigrams.flatten(), bigrams.flatten(), fires.flatten(0, 1)

    uni_a, bi_a, f_a = flat(tokens_a, fires_a)
    found = [ngram_triggers(ids, f_a, min_count, min_rate) for ids in (uni_a, bi_a)]
    # unigram ids lie below vocab_size and bigram ids above: the two lists concatenate sorted
    ngrams, triggers = torch.cat([found[0][0], found[1][0]]), torch.cat([found[0][1], found[1][1]])
    uni_b, bi_b, f_b = flat(tokens_b, fires_b)
    kept = (uni_b >= 0)[:, None]
    hit = at_trigger(uni_b, ngrams, triggers) | at_trigger(bi_b, ngrams, triggers)
    shape = (*tokens_b.shape, n_neurons)
    firings = (f_b & kept).view(shape).sum(1)
    at = (f_b & hit & kept).view(shape).sum(1)
    (count_u, rate_u), (count_bi, rate_bi) = (ngram_rates(ids, f_b, ngrams) for ids in (uni_b, bi_b))
    counts, rates = count_u + count_bi, rate_u + rate_bi  # an n-gram is counted by one of the two
    confirmed = triggers & (counts >= 2)[:, None] & (rates >= min_rate)
    last_token = torch.where(ngrams < vocab_size, ngrams, (ngrams - vocab_size) % vocab_size)
    _, token_index = last_token.unique(return_inverse=True)
    by_token = torch.zeros(int(token_index.max()) + 1 if len(token_index) else 0, n_neurons)
    by_token.index_add_(0, token_index, confirmed.float())
    return {"firings": firings, "at_trigger": at, "confirmed_tokens": (by_token > 0).sum(0)}


def _decoder(model: Transformer):
    tokenizer = model.tokenizer
    if tokenizer is None:
        return lambda ids: " ".join(str(i) for i in ids)
    return tokenizer.decode
