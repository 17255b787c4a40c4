# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # The catalogue: head kinds, neuron kinds and the residual stream's bookkeeping
#
# :::{admonition} What this chapter found, and how to rerun it
# :class: tip
# **Result:** {glue:md}`chapter_result`
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with both
# models converted; {glue:text}`rerun_cold` from a cold cache, whose first loads dequantise the
# models' GGUF files. Nothing trains.
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **This chapter reproduces** part of the catalogue of inner behaviours that closes
# {cite:t}`ferrando2024primer` (section 5): positional, subword-joiner, syntactic, copying and
# successor heads {cite:p}`gould2023successor`, memory management by heads and neurons, neurons that fire
# over a range of positions {cite:p}`voita2024neurons`, neurons that tell the task of a prompt or
# stand for a concept, the anisotropy that outlier dimensions
# make {cite:p}`timkey2021rogue`, and the last layers' frequency bias
# {cite:p}`kobayashi2023frequency`, on two pretrained models: SmolLM2-135M
# {cite:p}`allal2025smollm2` and Gemma-3-270M {cite:p}`gemmateam2025gemma3`. Each claim is judged
# against a criterion in `notebooks/criteria/catalogue.toml`, committed before any of its
# measurements, with a bootstrap interval over text windows or items.
#
# **The claims.** The Primer's survey lists what individual components of a language model have
# been found to do. Among the heads: *positional heads* that attend to the token itself or the
# previous one; *subword-joiner heads* that attend to earlier pieces of the word being read;
# *copying heads*, whose OV circuit writes the token they attend to; and *successor heads*
# (Gould et al.), whose OV circuit maps "Monday" to "Tuesday". Among the neurons: some *fire
# over a range of positions*, and some *remove what made them fire*. In the residual stream:
# heads that attend to their own position with an OV circuit of negative eigenvalues (*memory
# management*), outlier dimensions that make the representations *anisotropic* (all pointing
# roughly the same way), a *direct path* from embedding to unembedding that holds bigram statistics,
# and late layers that shift the prediction towards *frequent tokens*.
#
# **The experiment.** One protocol for every kind: a score per head (or neuron) computed on one
# half of the text (split A), the best component of that kind chosen there, and its score
# measured on the other half (split B), with a bootstrap over B's windows. A component chosen as
# the maximum of hundreds is always extreme on the data that chose it; measured on new data it
# has to earn its score. Beside every score, the level chance would give and the distribution
# over all components. The same rule, "a head of this kind scores above 0.5 on B", judges every
# head kind, on both models.
#
# A score says what a component looks like, not that the model uses it. So the previous-token,
# copying and successor heads, like the syntactic and joiner heads, are also mean-ablated, the
# top three against random heads of their layers, on prompts none of them was chosen on; and the
# neurons that promote or suppress a class are ablated ten at a time where a class member is the
# answer, their *direct* effect (what they write into the answer's logit) measured apart from
# their *total* effect (what the whole network does without them).
#
# *Syntactic heads* come from sentences whose structure we write: subject-verb agreement across
# an attractor, where the heads found on one set of nouns are measured, and ablated, on another.
# Neurons that *promote or suppress a class of tokens* are read through the unembedding. Last,
# behaviours of several heads together: *function vectors* {cite:p}`todd2024function`, the summed
# outputs of a few heads that carry an in-context task to a prompt without examples, and
# *context retrieval*, where the request is read before the entity is fetched. The first block's
# neurons are tested as *n-gram detectors*: what makes them fire on one half of a text, and
# whether it is there when they fire on the other half. And two kinds read by when they fire:
# neurons whose activation *predicts the task* of an in-context prompt, and *concept neurons*
# that fire for the members of a class of words, members they were not chosen on included.

# %% tags=["parameters"]
model_name = "smollm2-135m"  # [model] the model the exercises read (one of models)
models = ("smollm2-135m", "gemma3-270m")  # [non-empty] the two pretrained models the criteria name
n_windows = 64  # [> 2] windows of text per split (A chooses, B measures)
window_length = 64  # [> 3] tokens per window, BOS included where the model uses one
n_tokens_copy = 500  # [> 2] tokens that choose a copying head, and as many others that measure it
n_random_neurons = 200  # [> 0] random neurons of the chosen neuron's layer, for its chance level
n_random_draws = 20  # [> 0] random dimension sets for the anisotropy control
n_control_draws = 5  # [> 0] random head or neuron sets whose damage is averaged against a chosen set's
n_retrieval = 64  # [> 2] context-retrieval prompts
n_sentences = 64  # [> 2] agreement sentences per split (A chooses heads, B measures them)
n_sequences = 64  # [> 2] repeated random sequences that measure head ablations (as many give the means)
n_top_neurons = 10  # [> 0] neurons of a class ablated together
n_frequent = 500  # [> 2] the text's most frequent tokens, for the direct path
n_resamples = 2000  # [> 99] bootstrap resamples
seed = 0  # [min 0] which windows, tokens and random draws
quick = False  # a small run for CI: SmolLM2 only, fewer windows

# %% tags=["setup"]
import math
import random
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown, display

import resid
from resid import (
    attribution,
    behaviours,
    book,
    data,
    exercises,
    function_vectors,
    heads,
    hooks,
    metrics,
    neurons,
    patching,
    stats,
)
from resid.interval import Interval

ledger = book.start_chapter("catalogue", seed)  # criteria, claims and checks; theme and seed
if quick:
    models, n_windows, n_tokens_copy, n_random_neurons, n_random_draws, n_resamples, n_retrieval = (
        models[:1], 8, 50, 20, 3, 200, 16)  # fmt: skip
    n_sentences, n_frequent, n_sequences, n_control_draws = 16, 100, 16, 2
torch.set_grad_enabled(False)  # nothing in this chapter takes a gradient
SUFFIX = {"smollm2-135m": "smollm2", "gemma3-270m": "gemma3"}  # the criteria's ids end in these
LABEL = {"smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma-3-270M"}
if unknown := [m for m in models if m not in SUFFIX]:
    raise ValueError(f"models={unknown}: the criteria name only {sorted(SUFFIX)}")
if model_name not in models:
    raise ValueError(f"model_name={model_name!r}: the exercises read one of models={models}")
measured = {}  # criterion id -> ((estimate, low, high), what it is)


def bootstrap_mean(values: torch.Tensor) -> Interval:
    return stats.bootstrap(values, n_resamples=n_resamples, seed=seed).item()


def bootstrap_rows(statistic, n: int) -> Interval:
    """A statistic of a set of rows (windows, items), with a bootstrap over the rows."""
    return stats.bootstrap_statistic(statistic, torch.arange(n), n_resamples=n_resamples, seed=seed)


# %% tags=["quick"]
# The CI's quick run only: a run at the defaults leaves this cell out, and so does the fingerprint
n_sequences, n_retrieval, n_sentences, n_windows = 8, 8, 8, 6


# %% [markdown]
# ## The models and the text
#
# Both models are read through `resid.load`, which dequantises their GGUF files into the book's
# one `Transformer` class. The text is the Python documentation shipped with every CPython
# (`pydoc`), tokenized by each model; windows of 64 tokens start with the model's BOS token where
# its tokenizer adds one. Split A and split B are disjoint sets of windows.


# %%
def text_windows(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """Split A and split B (``[window, pos]``), the whole text's token ids, and whether a BOS
    token leads each window."""
    hf = model.tokenizer.hf
    probe = hf(" x", add_special_tokens=True)["input_ids"]
    uses_bos = hf.bos_token_id is not None and probe[0] == hf.bos_token_id
    ids = data.token_ids(data.corpus("pydoc"), model.tokenizer)
    body = window_length - int(uses_bos)
    drawn = data.windows(ids, body, 2 * n_windows, seed=seed)
    drawn = drawn[torch.randperm(len(drawn), generator=torch.Generator().manual_seed(seed))]
    if uses_bos:
        drawn = torch.cat([torch.full((len(drawn), 1), hf.bos_token_id), drawn], 1)
    return drawn[:n_windows], drawn[n_windows:], ids, uses_bos


loaded, split_a, split_b, all_ids, bos_first, rows = {}, {}, {}, {}, {}, []
for name in models:
    model = resid.load(name)
    loaded[name] = model
    split_a[name], split_b[name], all_ids[name], uses_bos = text_windows(model)
    bos_first[name] = uses_bos
    cfg = model.cfg
    rows.append({"model": LABEL[name], "layers": cfg.n_layers, "heads": cfg.n_heads, "d_model": cfg.d_model,
                 "d_mlp": cfg.d_mlp, "vocabulary": cfg.vocab_size, "BOS first": uses_bos,
                 "pydoc tokens": len(all_ids[name]), "windows per split": n_windows})  # fmt: skip
    overlap = set(map(tuple, split_a[name].tolist())) & set(map(tuple, split_b[name].tolist()))
    ledger.check(f"{LABEL[name]}: splits A and B share no window", not overlap,
                 f"{n_windows} windows each")  # fmt: skip
pd.DataFrame(rows).style.hide(axis="index")

# %% [markdown]
# ## Positional heads: the token itself and the one before
#
# A head's *previous* score is its mean attention weight on the previous token, its *self*
# score the weight on the query's own position, over queries 2 onwards
# (`heads.positional_scores`). Chance is a head that spreads its attention uniformly over the
# keys it can see: weight $1/(q+1)$ at query $q$. The figure shows every head of both models;
# the table, the head chosen on split A and its score on split B. The Primer's list also has
# heads that attend to the *next* token; both models here are causal, where no query sees the
# token after it, so that kind is tested below on a bidirectional encoder.

# %%
patterns_a = {name: heads.attention_patterns(loaded[name], split_a[name]) for name in models}
patterns_b = {name: heads.attention_patterns(loaded[name], split_b[name]) for name in models}
for name in models:
    sums = patterns_b[name].sum(-1)
    ledger.check(f"{LABEL[name]}: every attention row sums to 1",
                 torch.allclose(sums, torch.ones_like(sums), atol=1e-4),
                 f"max |sum - 1| = {(sums - 1).abs().max().item():.1e}")  # fmt: skip


def per_window(patterns: torch.Tensor) -> dict[str, torch.Tensor]:
    """Positional scores per window: ``{kind: [window, layer, head]}``."""
    scores = [heads.positional_scores(patterns[:, w : w + 1]) for w in range(patterns.shape[1])]
    return {kind: torch.stack([s[kind] for s in scores]) for kind in scores[0]}


def uniform_patterns(n: int) -> torch.Tensor:
    """A head that attends uniformly to every key it can see: ``[1, 1, 1, q, k]``."""
    causal = torch.ones(n, n).tril()
    return (causal / causal.sum(-1, keepdim=True))[None, None, None]


positional_a = {name: per_window(patterns_a[name]) for name in models}
positional_b = {name: per_window(patterns_b[name]) for name in models}
uniform = heads.positional_scores(uniform_patterns(window_length))
chance = {kind: uniform[kind].item() for kind in ("previous", "self")}
by_hand = np.mean([1 / (q + 1) for q in range(2, window_length)])
agrees = all(abs(chance[kind] - by_hand) < 1e-6 for kind in chance)
ledger.check("chance for previous and self is the mean of 1/(q+1) over queries 2 onwards",
             agrees, f"{by_hand:.4f}")  # fmt: skip


def chosen_on_a(scores_a: torch.Tensor) -> tuple[int, int]:
    """The (layer, head) with the largest mean score over split A's windows."""
    mean = scores_a.mean(0)
    layer, head = divmod(int(mean.argmax()), mean.shape[1])
    return layer, head


positional_rows = []
for name in models:
    for kind in ("previous", "self"):
        layer, head = chosen_on_a(positional_a[name][kind])
        estimate = bootstrap_mean(positional_b[name][kind][:, layer, head])
        key = {"previous": "previous_token_head", "self": "self_head"}[kind]
        measured[f"{key}_{SUFFIX[name]}"] = (estimate, "score")
        all_heads = positional_b[name][kind].mean(0).flatten()
        positional_rows.append({
            "model": LABEL[name], "kind": kind, "chosen on A": f"L{layer}H{head}",
            "score on A": positional_a[name][kind][:, layer, head].mean().item(),
            "score on B [95% CI]": f"{estimate[0]:.2f} [{estimate[1]:.2f}, {estimate[2]:.2f}]",
            "chance (uniform)": chance[kind], "median head on B": all_heads.median().item(),
            "heads above 0.5 on B": int((all_heads > 0.5).sum())})  # fmt: skip
pd.DataFrame(positional_rows).style.hide(axis="index").format(precision=3)

# %% tags=["plot"] alt="Heatmaps over layer and head of the previous-token and self-attention scores on split B, one row per model (SmolLM2 and Gemma-3-270M)."
fig, axes = plt.subplots(len(models), 2, figsize=(11, 3.2 * len(models)), squeeze=False)
for row, name in enumerate(models):
    for col, kind in enumerate(("previous", "self")):
        grid = positional_b[name][kind].mean(0).T.numpy()  # [head, layer]
        sns.heatmap(grid, ax=axes[row, col], cmap="viridis", vmin=0, vmax=1, cbar=col == 1)
        axes[row, col].set(title=f"{LABEL[name]}: {kind} score (split B)", xlabel="layer", ylabel="head")
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Heads that attend to the next token, in a bidirectional encoder
#
# No query of a causal model sees the token after it, so the Primer's next-token heads are
# tested on the one bidirectional encoder on disk, all-MiniLM-L6-v2 (6 layers of 12 heads), with
# a criterion of their own committed before this code: windows of the same text in the form the
# encoder was trained on ([CLS], 62 tokens, [SEP]), the head chosen on split A by its *next*
# score (the mean attention weight on the key right after the query) and measured on split B.
# Chance is a head that attends uniformly to all 64 keys.

# %%
encoder = resid.load("minilm-l6")
tokenizer = encoder.tokenizer.hf
encoder_ids = data.token_ids(data.corpus("pydoc"), data.HFTokenizer(tokenizer))  # no [CLS] or [SEP] inside
drawn = data.windows(encoder_ids, window_length - 2, 2 * n_windows, seed=seed)
drawn = drawn[torch.randperm(len(drawn), generator=torch.Generator().manual_seed(seed))]
ends = [torch.full((len(drawn), 1), token) for token in (tokenizer.cls_token_id, tokenizer.sep_token_id)]
drawn = torch.cat([ends[0], drawn, ends[1]], 1)  # [window, window_length]
encoder_a, encoder_b = drawn[:n_windows], drawn[n_windows:]
ledger.check("MiniLM-L6: splits A and B share no window",
             not set(map(tuple, encoder_a.tolist())) & set(map(tuple, encoder_b.tolist())),
             f"{n_windows} windows each")  # fmt: skip
next_a = per_window(heads.attention_patterns(encoder, encoder_a))["next"]  # [window, layer, head]
next_b = per_window(heads.attention_patterns(encoder, encoder_b))["next"]
layer, head = chosen_on_a(next_a)
estimate = bootstrap_mean(next_b[:, layer, head])
measured["next_token_head_minilm"] = (estimate, "score")
encoder_heads = next_b.mean(0)  # [layer, head]
next_token_row = {"model": "MiniLM-L6", "chosen on A": f"L{layer}H{head}",
                  "score on A": next_a[:, layer, head].mean().item(),
                  "score on B [95% CI]": estimate.text(fmt=".2f"),
                  "chance (uniform)": 1 / window_length, "median head on B": encoder_heads.median().item(),
                  "heads above 0.5 on B": int((encoder_heads > 0.5).sum())}  # fmt: skip
del encoder
pd.DataFrame([next_token_row]).style.hide(axis="index").format(precision=3)

# %% tags=["plot"] alt="A heatmap over layer and head of MiniLM-L6's next-token scores on split B: the mean attention weight each head puts on the token right after its query."
fig, ax = plt.subplots(figsize=(5.5, 3.2))
sns.heatmap(encoder_heads.T.numpy(), ax=ax, cmap="viridis", vmin=0, vmax=1)
ax.set(title="MiniLM-L6: next score (split B)", xlabel="layer", ylabel="head")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Subword-joiner heads
#
# Code documentation splits many words into pieces ("un" "believ" "able"). A piece continues
# the word before it when it starts with a letter or digit and the previous piece ends with one
# (`heads.word_starts`). A subword-joiner head puts its attention, at a word's later pieces, on
# the same word's earlier pieces. A previous-token head does that too, as a side effect, so the
# score is the *joiner index* (`heads.joiner_index`): attention on the word's earlier pieces,
# minus the attention on the previous token where a token begins a new word. A previous-token
# head scores about 0, a head that reaches back within words and only within words up to 1.
# Each split's index pools its tokens; the interval resamples B's windows.

# %%
joiner_rows, joiner_grids = [], {}
for name in models:
    model = loaded[name]
    starts_a = heads.word_starts(model.tokenizer, split_a[name])
    starts_b = heads.word_starts(model.tokenizer, split_b[name])
    index_a = heads.joiner_index(patterns_a[name], starts_a)  # [layer, head]
    joiner_grids[name] = heads.joiner_index(patterns_b[name], starts_b)
    layer, head = divmod(int(index_a.argmax()), index_a.shape[1])
    chosen = patterns_b[name][layer : layer + 1, :, head : head + 1]  # [1, window, 1, q, k]

    def joiner_of(windows: torch.Tensor, chosen=chosen, starts=starts_b) -> float:
        return heads.joiner_index(chosen[:, windows], starts[windows]).item()

    estimate = bootstrap_rows(joiner_of, n_windows)
    measured[f"subword_joiner_{SUFFIX[name]}"] = (estimate, "index")
    spread = uniform_patterns(window_length).expand(1, n_windows, 1, -1, -1)
    uniform_index = heads.joiner_index(spread, starts_b)
    joiner_rows.append({
        "model": LABEL[name], "chosen on A": f"L{layer}H{head}", "index on A": index_a[layer, head].item(),
        "index on B [95% CI]": f"{estimate[0]:.2f} [{estimate[1]:.2f}, {estimate[2]:.2f}]",
        "chance (uniform)": uniform_index.item(), "median head on B": joiner_grids[name].median().item(),
        "tokens inside words (B)": f"{(~starts_b).float().mean().item():.0%}"})  # fmt: skip
pd.DataFrame(joiner_rows).style.hide(axis="index").format(precision=3)

# %% [markdown]
# Does the score name what the heads do? The three heads with the largest joiner index on split A,
# mean-ablated together (each head's output replaced by its mean over split A at the same
# position), against three random heads: the rise in next-token loss on split B where the next
# token continues a word.


# %%
ablation_rows = []
with torch.no_grad():
    for name in models:
        model = loaded[name]
        starts_a = heads.word_starts(model.tokenizer, split_a[name])
        starts_b = heads.word_starts(model.tokenizer, split_b[name])
        index_a = heads.joiner_index(patterns_a[name], starts_a).flatten()
        n_heads = model.cfg.n_heads
        top = [divmod(int(i), n_heads) for i in index_a.topk(3).indices]
        rest = [divmod(i, n_heads) for i in range(len(index_a)) if divmod(i, n_heads) not in top]
        generator = torch.Generator().manual_seed(seed)
        draws = [
            [rest[int(i)] for i in torch.randperm(len(rest), generator=generator)[:3]]
            for _ in range(n_control_draws)
        ]
        continues = (~starts_b[:, 1:]).float()  # [window, pos - 1]: the next token continues a word
        clean = heads.next_token_losses(model, split_b[name])

        def rise(chosen, model=model, name=name, clean=clean, continues=continues) -> torch.Tensor:
            ablation = heads.mean_ablation(model, split_a[name], chosen)
            ablated = heads.next_token_losses(model, split_b[name], ablation)
            return ((ablated - clean) * continues).sum(1) / continues.sum(1).clamp_min(1)  # [window]

        top_rise = rise(top)
        random_rise = torch.stack([rise(draw) for draw in draws]).mean(0)
        estimate = stats.bootstrap_statistic(
            lambda a, b: (a.mean() / b.mean()).item(),
            top_rise,
            random_rise,
            n_resamples=n_resamples,
            seed=seed,
        )
        measured[f"joiner_heads_matter_{SUFFIX[name]}"] = (estimate, "ratio")
        ablation_rows.append({
            "model": LABEL[name],
            "top joiner heads (A)": ", ".join(f"L{layer}H{head}" for layer, head in top),
            "loss on word-continuing tokens (B)": ((clean * continues).sum() / continues.sum()).item(),
            "rise, joiner heads ablated": top_rise.mean().item(),
            "rise, 3 random heads": random_rise.mean().item(),
            "ratio [95% CI]": f"{estimate[0]:.2f} [{estimate[1]:.2f}, {estimate[2]:.2f}]"})  # fmt: skip
pd.DataFrame(ablation_rows).style.hide(axis="index").format(precision=3)

# %% [markdown]
# ## Syntactic heads: from a word to the word it agrees with
#
# The Primer: some heads attend to tokens in a syntactic relation to the token being read "far
# more than a random baseline". We test one relation whose structure we control, subject-verb
# agreement across an *attractor*: in "The key near the cabinets", the next word is " is",
# agreeing with *key*, not with the nearer *cabinets*. The last token (the attractor) is where the
# verb's number is decided, so we ask which heads attend from there to the subject
# (`behaviours.agreement_splits`: half the sentences have a singular subject and a plural
# attractor, half the reverse; the preposition phrases are one to four tokens long, so the subject
# sits at no fixed distance and no positional head can find it).
#
# A head's *syntactic score* on a sentence is its attention from the last token on the subject
# minus its mean attention on the other words after "The" (`heads.relation_scores`): a head that
# attends without regard to the relation scores about 0, whatever its habits. Split A's sentences
# use one half of the nouns and choose the head; split B's use the other half and measure it.
# Then the heads at work: the three best heads on A, mean-ablated at the last position, against
# three random heads of the same layers, on the margin by which the model prefers the agreeing
# verb on B. This is one relation of the several the Primer has in mind (determiner and noun, a
# preposition and what it attaches to, ...): the one where the distance varies and the model's
# preference shows whether it read the relation, so that a positional head cannot pass for a
# syntactic one.


# %%
def random_heads_like(chosen: list[tuple[int, int]], n_heads: int, generator: torch.Generator):
    """For each chosen head, another head of its layer drawn at random, none of them chosen (a
    layer with too few others repeats a draw, and the set shrinks)."""
    picked = set()
    for layer, _ in chosen:
        others = [(layer, h) for h in range(n_heads) if (layer, h) not in chosen and (layer, h) not in picked]
        if others:
            picked.add(others[int(torch.randint(len(others), (1,), generator=generator))])
    return sorted(picked)


syntactic_rows, syntactic_maps = [], {}
for name in models:
    model = loaded[name]
    choose, measure_on = behaviours.agreement_splits(model.tokenizer, n=n_sentences, seed=seed)
    # [sentence, layer, head]
    scores_a = heads.relation_scores(model, choose.tokens, choose.subject, choose.first)
    scores_b = heads.relation_scores(model, measure_on.tokens, measure_on.subject, measure_on.first)
    mean_a, n_heads = scores_a.mean(0), model.cfg.n_heads
    best = divmod(int(mean_a.argmax()), n_heads)
    estimate = bootstrap_mean(scores_b[:, best[0], best[1]])
    measured[f"syntactic_head_{SUFFIX[name]}"] = (estimate, "score")
    syntactic_maps[name] = scores_b.mean(0)  # [layer, head]
    # the heads at work: the agreeing verb's margin, full and with heads mean-ablated at the end
    top = [divmod(int(i), n_heads) for i in mean_a.flatten().topk(3).indices]
    generator = torch.Generator().manual_seed(seed)
    draws = [random_heads_like(top, n_heads, generator) for _ in range(n_control_draws)]
    layers = sorted({layer for head_set in [top, *draws] for layer, _ in head_set})
    means = heads.last_position_outputs(model, choose.tokens, layers)
    margin = behaviours.agreement_margins(model, measure_on)

    def fall(chosen, model=model, means=means, measure_on=measure_on, margin=margin) -> torch.Tensor:
        ablation = hooks.replace_heads(chosen, means, position=-1)
        ablated = behaviours.agreement_margins(model, measure_on, ablation)
        return margin - ablated  # [sentence]

    top_fall = fall(top)
    random_fall = torch.stack([fall(draw) for draw in draws]).mean(0)
    difference = bootstrap_mean(top_fall - random_fall)
    measured[f"syntactic_heads_matter_{SUFFIX[name]}"] = (difference, "Δ margin (logits)")
    all_heads = scores_b.mean(0).flatten()
    syntactic_rows.append({
        "model": LABEL[name], "chosen on A": f"L{best[0]}H{best[1]}",
        "score on A": mean_a[best].item(), "score on B [95% CI]": estimate.text(fmt=".2f"),
        "median head on B": all_heads.median().item(), "heads above 0.3 on B": int((all_heads > 0.3).sum()),
        "agreeing verb preferred (B)": (margin > 0).float().mean().item(),
        "mean margin (B)": margin.mean().item(),
        "top 3 heads (A)": ", ".join(f"L{layer}H{head}" for layer, head in top),
        "margin fall, top 3": top_fall.mean().item(), "margin fall, 3 random": random_fall.mean().item(),
        "difference [95% CI]": difference.text(fmt=".2f"),
    })  # fmt: skip
pd.DataFrame(syntactic_rows).style.hide(axis="index").format(precision=3)

# %% tags=["plot"] alt="Heatmaps over layer and head of the syntactic score on split B (attention from the last token on the subject, minus the mean on the other words), one per model."
fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 3.4), squeeze=False)
for ax, name in zip(axes[0], models, strict=True):
    grid = syntactic_maps[name].T.numpy()  # [head, layer]
    limit = max(abs(grid).max(), 0.05)
    sns.heatmap(grid, ax=ax, cmap="RdBu_r", vmin=-limit, vmax=limit, cbar_kws={"label": "syntactic score"})
    ax.set(title=f"{LABEL[name]}: syntactic score (split B)", xlabel="layer", ylabel="head")
plt.tight_layout()
plt.show()

# %% tags=["prose"]
control_notes = []
for row in syntactic_rows:
    if row["agreeing verb preferred (B)"] < 0.75:  # the criteria's positive control
        control_notes.append(
            f"{row['model']} prefers the agreeing verb on only {row['agreeing verb preferred (B)']:.0%} of "
            "split B's sentences (the criteria ask for 75%): it barely does agreement across an attractor, "
            "so its ablation row says little about what the heads do for it."
        )
display(Markdown(
    "The positive control, the model preferring the agreeing verb: "
    + "; ".join(f"{row['model']} on {row['agreeing verb preferred (B)']:.0%} of split B's sentences "
                f"(mean margin {row['mean margin (B)']:+.2f} logits)" for row in syntactic_rows)
    + ".\n\n" + " ".join(control_notes)
))  # fmt: skip

# %% [markdown]
# ### Exercise 11.4: a syntactic score by hand
#
# *Predict, then code and check · difficulty 2 of 3 · about 15 minutes*
#
# One query's attention weights over the keys up to itself are a row `row` (`[key]`, the query
# last). Write the syntactic score of that row: the weight on the subject's position `subject`
# minus the mean weight on the other keys after `first` (the position of "The") and before the
# query. **Predict** first: a head that attends from every token to the one before it, what does
# it score?

# %% tags=["starter"]
exercises.predict("11.4", ...)  # "positive", "about zero" or "negative"


def syntactic_score(row: torch.Tensor, subject: int, first: int) -> float:
    """row: [key], one query's attention (the query is the last key)."""
    raise NotImplementedError  # your code here


exercises.check("11.4", syntactic_score)


# %% tags=["hide-cell", "solution"]
def syntactic_score(row: torch.Tensor, subject: int, first: int) -> float:
    others = [k for k in range(first + 1, len(row) - 1) if k != subject]
    return (row[subject] - row[others].mean()).item()


exercises.predict("11.4", "negative")  # the previous token is one of the others, the subject is not
assert exercises.check("11.4", syntactic_score)

# %% [markdown]
# ## Successor heads and copying heads: what a head's OV circuit writes
#
# A head's *full OV circuit* $W_E W_{OV} W_U$ says how attending to a token raises the logit of
# every token (`heads.ov_circuit`; the input norm's gain and, in Gemma, the output norm's gain
# folded in). A *copying* head raises the attended token's own logit most; a *successor* head
# raises the next item of an ordinal list. Successor heads are chosen on numbers and letters and
# measured on days and months; copying heads are chosen on 500 of the pydoc text's 5000 most
# frequent tokens and measured on 500 others. Each list keeps its items that are one token
# (with a leading space) for the model, split where an item is not, and a head's score is the
# fraction of items whose largest logit, among all the lists' tokens, is their successor.

# %%
ORDINALS = {
    "numbers": "one two three four five six seven eight nine ten eleven twelve".split(),
    "letters": [chr(c) for c in range(ord("A"), ord("Z") + 1)],
    "days": "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split(),
    "months": ("January February March April May June July August September October November "
               "December").split(),
}  # fmt: skip


def single_token_runs(model, items: list[str]) -> list[torch.Tensor]:
    """The list's items as token ids, cut into runs of consecutive items that are one token each."""
    runs, run = [], []
    for item in items:
        ids = model.tokenizer.encode(" " + item)
        if len(ids) == 1:
            run.append(ids[0])
        else:
            runs.append(run)
            run = []
    runs.append(run)
    return [torch.tensor(r) for r in runs if len(r) >= 2]


successor_rows, successor_tables, successor_choosing = [], {}, {}
for name in models:
    model = loaded[name]
    choose = [r for lst in ("numbers", "letters") for r in single_token_runs(model, ORDINALS[lst])]
    measure = [r for lst in ("days", "months") for r in single_token_runs(model, ORDINALS[lst])]
    table_a = heads.successor_scores(model, choose)
    successor_choosing[name] = table_a
    best = table_a.loc[table_a["successor"].idxmax()]
    layer, head = int(best.layer), int(best["head"])
    ids = torch.cat(measure)
    offsets = torch.tensor([0, *[len(r) for r in measure]]).cumsum(0)
    items = torch.cat([torch.arange(a, b - 1) for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
    hits = (heads.ov_circuit(model, layer, head, ids)[items].argmax(1) == items + 1).float()
    estimate = bootstrap_mean(hits)
    table_b = heads.successor_scores(model, measure)
    successor_tables[name] = table_b
    ledger.check(
        f"{LABEL[name]}: the chosen head's per-item hits average to heads.successor_scores",
        abs(hits.mean().item() - table_b.set_index(["layer", "head"]).loc[(layer, head), "successor"]) < 1e-9,
        f"{hits.mean().item():.3f}")  # fmt: skip
    measured[f"successor_head_{SUFFIX[name]}"] = (estimate, "fraction")
    successor_rows.append({
        "model": LABEL[name], "chosen on numbers and letters": f"L{layer}H{head}",
        "score there": best.successor, "items measured": len(items),
        "score on days and months [95% CI]": f"{estimate[0]:.2f} [{estimate[1]:.2f}, {estimate[2]:.2f}]",
        "chance": 1 / len(ids), "median head": table_b["successor"].median(),
        "best head on days and months": table_b["successor"].max()})  # fmt: skip
pd.DataFrame(successor_rows).style.hide(axis="index").format(precision=3)

# %%
copy_rows, copy_tables, copy_tokens = [], {}, {}
for name in models:
    model = loaded[name]
    counts = torch.bincount(all_ids[name], minlength=model.cfg.vocab_size)
    frequent = counts.topk(5000).indices
    frequent = frequent[torch.randperm(len(frequent), generator=torch.Generator().manual_seed(seed))]
    choosing, measuring = frequent[:n_tokens_copy], frequent[n_tokens_copy : 2 * n_tokens_copy]
    copy_tokens[name] = (choosing, measuring)
    table_a = heads.copy_scores(model, choosing)
    copy_tables[name] = table_a
    best = table_a.loc[table_a["copying"].idxmax()]
    layer, head = int(best.layer), int(best["head"])
    ov = heads.ov_circuit(model, layer, head, measuring)
    hits = (ov.argmax(1) == torch.arange(len(measuring))).float()
    estimate = bootstrap_mean(hits)
    measured[f"copying_head_{SUFFIX[name]}"] = (estimate, "fraction")
    copy_rows.append({
        "model": LABEL[name], "chosen on A's tokens": f"L{layer}H{head}", "copying there": best.copying,
        "copying on B's tokens [95% CI]": f"{estimate[0]:.2f} [{estimate[1]:.2f}, {estimate[2]:.2f}]",
        "chance": 1 / n_tokens_copy, "median head (A's tokens)": table_a["copying"].median(),
        "heads above 0.5 (A's tokens)": int((table_a["copying"] > 0.5).sum())})  # fmt: skip
pd.DataFrame(copy_rows).style.hide(axis="index").format(precision=3)

# %% [markdown]
# ## Previous-token, copying and successor heads at work
#
# A score says what a head's weights or attention look like; an ablation says whether the model
# needs the head for the behaviour it is named for. For each kind, the three heads with the
# largest score (chosen as above, on split A, A's tokens, or numbers and letters) are
# mean-ablated together, against three heads drawn at random from the same layers (five draws,
# averaged), on prompts none of them were chosen on:
#
# - **previous-token and copying heads**, on repeated random sequences (24 tokens, then the same
#   24 again) built from the copying section's measuring tokens: a model copies the repeat from
#   context, through an induction circuit that needs a head carrying the previous token forward
#   and a head that copies what it attends to {cite:p}`olsson2022induction`. The damage is the rise
#   in the repeat's loss (nats); the means come from other sequences, built from the choosing
#   tokens;
# - **successor heads**, on three consecutive days or months (" Monday Tuesday Wednesday"); the
#   damage is the fall in the next item's log-probability, the heads ablated at the last
#   position with their mean there over numbers and letters. The criteria's lists have no
#   commas; in a quick run before this execution SmolLM2's top prediction after such a list was
#   punctuation, not the next item, so the table adds the same ablation on lists written with
#   commas (" Monday, Tuesday, Wednesday,"): a row chosen after that result, exploratory, judged
#   by no criterion.
#
# The estimate is the chosen heads' damage minus the random heads', per prompt, with an interval
# over the prompts; beside it, the full model's behaviour, the positive control without which an
# ablation says little.

# %%
SEQUENCE = 24  # tokens per half of a repeated sequence


def head_grid(table: pd.DataFrame, column: str, n_layers: int, n_heads: int) -> torch.Tensor:
    """A per-head table's ``column`` as ``[layer, head]``."""
    grid = torch.full((n_layers, n_heads), float("nan"))
    grid[table["layer"].tolist(), table["head"].tolist()] = torch.tensor(table[column].tolist()).float()
    return grid


def ordinal_prompts(
    model, items: list[str], wrap: bool, prefix: list[int], sep: str = " "
) -> tuple[list, torch.Tensor]:
    """Three consecutive items and the next one's first token: the prompts and their answers.
    ``sep=", "`` writes " Monday, Tuesday, Wednesday," instead of " Monday Tuesday Wednesday"."""
    prompts, answers = [], []
    for i in range(len(items) if wrap else len(items) - 3):
        before = " " + sep.join(items[(i + j) % len(items)] for j in range(3)) + sep.strip()
        prompts.append(torch.tensor(prefix + model.tokenizer.encode(before)))
        answers.append(model.tokenizer.encode(" " + items[(i + 3) % len(items)])[0])
    return prompts, torch.tensor(answers)


at_work_rows = []
for name in models:
    model = loaded[name]
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    prefix = [model.tokenizer.hf.bos_token_id] if bos_first[name] else []
    generator = torch.Generator().manual_seed(seed)
    # previous-token and copying heads: the repeat of a random sequence
    choosing, measuring = copy_tokens[name]
    lead = torch.tensor([prefix]) if prefix else None
    for_means = heads.repeated_tokens(n_sequences, SEQUENCE, choosing, seed=seed, prefix=lead)
    sequences = heads.repeated_tokens(n_sequences, SEQUENCE, measuring, seed=seed + 1, prefix=lead)
    start = len(prefix) + SEQUENCE  # the repeat's first token, which nothing predicts
    clean = heads.next_token_losses(model, sequences)  # [sequence, pos - 1]: loss of token pos + 1
    first_pass, repeat = clean[:, len(prefix) : start - 1].mean(1), clean[:, start:].mean(1)

    def repeat_rise(
        chosen, model=model, for_means=for_means, sequences=sequences, repeat=repeat, start=start
    ):
        ablated = heads.next_token_losses(model, sequences, heads.mean_ablation(model, for_means, chosen))
        return ablated[:, start:].mean(1) - repeat  # [sequence]

    kinds = {
        "previous-token": (
            "previous_token_heads_matter",
            positional_a[name]["previous"].mean(0),
            repeat_rise,
        ),
        "copying": (
            "copying_heads_matter",
            head_grid(copy_tables[name], "copying", n_layers, n_heads),
            repeat_rise,
        ),
    }
    copies = bool(repeat.mean() <= first_pass.mean() - 2)  # the criteria's positive control
    copy_control = f"repeat {repeat.mean().item():.2f} nats vs first pass {first_pass.mean().item():.2f}"
    controls = {"previous-token": (copy_control, copies), "copying": (copy_control, copies)}

    # successor heads: the next day or month, in the criteria's format and (exploratory) with commas
    def successor_damage(sep: str, model=model, prefix=prefix, controls=controls, kind="successor"):
        choose_prompts = [p for lst in ("numbers", "letters")
                          for p in ordinal_prompts(model, ORDINALS[lst], False, prefix, sep)[0]]  # fmt: skip
        measure_sets = [
            ordinal_prompts(model, ORDINALS[lst], True, prefix, sep) for lst in ("days", "months")
        ]
        prompts = [p for prompts_, _ in measure_sets for p in prompts_]
        answers = torch.cat([answers_ for _, answers_ in measure_sets])
        logits = heads.last_position_logits(model, prompts)
        clean = heads.answer_log_probs(logits, answers)
        right = logits.argmax(-1) == answers
        controls[kind] = (
            f"top prediction right on {right.float().mean().item():.0%}",
            bool(right.float().mean() >= 0.5),
        )
        means = heads.last_position_outputs(model, choose_prompts, list(range(model.cfg.n_layers)))

        def log_prob_fall(chosen) -> torch.Tensor:
            ablation = hooks.replace_heads(chosen, means, position=-1)
            ablated = heads.last_position_logits(model, prompts, ablation)
            return clean - heads.answer_log_probs(ablated, answers)  # [prompt]

        return log_prob_fall

    successor_grid = head_grid(successor_choosing[name], "successor", n_layers, n_heads)
    kinds["successor"] = ("successor_heads_matter", successor_grid, successor_damage(" "))
    # not a claim: the same ablation on lists written with commas, added after a quick run in which
    # the criteria's format failed its positive control (exploratory)
    kinds["successor, commas (exploratory)"] = (
        None, successor_grid, successor_damage(", ", kind="successor, commas (exploratory)"))  # fmt: skip
    for kind, (stem, scores, damage) in kinds.items():
        top = [divmod(int(i), n_heads) for i in scores.nan_to_num(float("-inf")).flatten().topk(3).indices]
        draws = [random_heads_like(top, n_heads, generator) for _ in range(n_control_draws)]
        top_damage = damage(top)
        random_damage = torch.stack([damage(draw) for draw in draws]).mean(0)
        difference = bootstrap_mean(top_damage - random_damage)
        if stem is not None:
            measured[f"{stem}_{SUFFIX[name]}"] = (difference, "Δ nats")
        at_work_rows.append({
            "model": LABEL[name], "kind": kind,
            "top 3 heads": ", ".join(f"L{layer}H{head}" for layer, head in top),
            "prompts": len(top_damage), "full model (positive control)": controls[kind][0],
            "positive control met": controls[kind][1],
            "damage, top 3": top_damage.mean().item(), "damage, 3 random": random_damage.mean().item(),
            "difference [95% CI]": difference.text(fmt=".2f"),
        })  # fmt: skip
pd.DataFrame(at_work_rows).style.hide(axis="index").format(precision=2)

# %% tags=["prose"]
unmet = [f"{row['model']}'s {row['kind']} row ({row['full model (positive control)']})"
         for row in at_work_rows if not row["positive control met"]]  # fmt: skip
display(Markdown(
    "Every positive control is met: each model copies the repeat from context and continues the lists, so "
    "each ablation row tests heads the model uses for a behaviour it has."
    if not unmet else
    "The positive control fails for " + "; ".join(unmet) + ": the model barely does that behaviour, so its "
    "ablation row says little about the heads."
))  # fmt: skip

# %% [markdown]
# ## Memory management: heads that attend to themselves and erase, neurons that remove their input
#
# A head whose OV circuit, as a map from the residual stream to itself, has eigenvalues with
# negative real parts writes the opposite of what it reads. If it also attends to its own
# position it removes from the stream what the stream holds there: the Primer's *memory
# management*. The sign statistic is $\sum_i \mathrm{Re}\,\lambda_i / \sum_i |\lambda_i|$
# (`heads.ov_eigenvalue_signs`): +1 for a head that writes back what it reads, -1 for one that
# erases it. The head tested is the one with the largest self score on split A: it was chosen
# by where it attends, never by its sign. Its interval is the bootstrap of that choice; where
# it has zero width, at least 95% of the resamples chose heads of that same sign (two heads
# hardly share a sign to the last digit, so the same head), and the sign is a property of its
# weights, with nothing left to vary with the windows.

# %%
eigen = {name: heads.ov_eigenvalue_signs(loaded[name]) for name in models}
memory_rows = []
for name in models:
    signs = torch.tensor(eigen[name]["eigenvalue sign"].to_numpy()).view(loaded[name].cfg.n_layers, -1)
    self_a = positional_a[name]["self"]  # [window, layer, head]
    layer, head = chosen_on_a(self_a)

    def sign_of_choice(windows: torch.Tensor, self_a=self_a, signs=signs) -> float:
        chosen_layer, chosen_head = chosen_on_a(self_a[windows])
        return signs[chosen_layer, chosen_head].item()

    estimate = bootstrap_rows(sign_of_choice, n_windows)
    measured[f"erasing_self_head_{SUFFIX[name]}"] = (estimate, "eigenvalue sign")
    memory_rows.append({
        "model": LABEL[name], "largest self score on A": f"L{layer}H{head}",
        "its self score on B": positional_b[name]["self"][:, layer, head].mean().item(),
        "its eigenvalue sign [choice CI]": f"{estimate[0]:+.2f} [{estimate[1]:+.2f}, {estimate[2]:+.2f}]",
        "median head's sign": signs.median().item(), "heads with sign < -0.3": int((signs < -0.3).sum()),
        "heads": signs.numel()})  # fmt: skip
pd.DataFrame(memory_rows).style.hide(axis="index").format(precision=3)

# %% tags=["plot"] alt="Scatter plots, one per model, of every head's self-attention score against the sign of its OV circuit's eigenvalues."
fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4), squeeze=False)
for ax, name in zip(axes[0], models, strict=True):
    self_b = positional_b[name]["self"].mean(0).flatten().numpy()
    ax.scatter(self_b, eigen[name]["eigenvalue sign"], s=12, alpha=0.6)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="self score (split B)", ylabel="OV eigenvalue sign", title=LABEL[name])
plt.suptitle("Every head: where it attends against what its OV circuit does")
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Exercise 11.1: the eigenvalue sign of an OV circuit
#
# *Coding · difficulty 1 of 3 · about 10 minutes*
#
# Write the sign statistic for a square matrix `ov` (`[d, d]`): the sum of the real parts of
# its eigenvalues over the sum of their absolute values (`torch.linalg.eigvals`; compute in
# float64). Before you run it: what should a head that copies score, one that erases, and one
# that rotates every direction by a quarter turn?


# %% tags=["starter"]
def eigenvalue_sign(ov: torch.Tensor) -> float:
    """ov: [d, d]. sum(Re λ) / sum(|λ|) over its eigenvalues λ."""
    raise NotImplementedError  # your code here


exercises.check("11.1", eigenvalue_sign)


# %% tags=["hide-cell", "solution"]
def eigenvalue_sign(ov: torch.Tensor) -> float:
    eigenvalues = torch.linalg.eigvals(ov.double())
    return (eigenvalues.real.sum() / eigenvalues.abs().sum()).item()


name = model_name
layer, head = chosen_on_a(positional_a[name]["self"])
before, after = heads.norm_gains(loaded[name], layer)  # what the residual sees: the norms' gains folded in
ov = loaded[name].OV(layer, head).double()
ov = ov if before is None else before.double()[:, None] * ov
ov = ov if after is None else ov * after.double()
table_sign = eigen[name].set_index(["layer", "head"]).loc[(layer, head), "eigenvalue sign"]
by_hand = eigenvalue_sign(ov)
# the package reads the d_head nonzero eigenvalues off the small product W_O W_V; the whole
# d_model x d_model circuit adds d_model - d_head eigenvalues that are zero up to rounding
ledger.check("an eigenvalue sign by hand equals heads.ov_eigenvalue_signs",
             abs(by_hand - table_sign) < 1e-6, f"{table_sign:+.3f}")  # fmt: skip
print(f"{LABEL[name]} L{layer}H{head}: {by_hand:+.3f} by hand, {table_sign:+.3f} from the package")
assert exercises.check("11.1", eigenvalue_sign)

# %% [markdown]
# A neuron reads the stream through its input direction (in a gated MLP, the gate's row: what
# makes it fire) and writes its output direction. A large negative cosine between the two
# (`neurons.in_out_cosines`, the norms' gains folded in) marks a neuron that removes what made
# it fire. Two random directions in 576 or 640 dimensions have a cosine with a standard
# deviation near $1/\sqrt{d} \approx 0.04$, so a cosine below -0.5 never happens by chance
# (the check below draws $10^5$ pairs). Interval: Wilson's for a proportion, over all the
# model's neurons.

# %%
cosines, neuron_rows = {}, []
for name in models:
    model = loaded[name]
    cosines[name] = torch.stack([neurons.in_out_cosines(model, layer) for layer in range(model.cfg.n_layers)])
    below = int((cosines[name] < -0.5).sum())
    estimate = stats.wilson_interval(below, cosines[name].numel())
    measured[f"erasing_neurons_{SUFFIX[name]}"] = (estimate, "fraction")
    generator = torch.Generator().manual_seed(seed)
    random_pairs = torch.nn.functional.cosine_similarity(
        *torch.randn(2, 100_000, model.cfg.d_model, generator=generator), dim=-1
    )
    ledger.check(
        f"{LABEL[name]}: no random pair of directions has a cosine below -0.5",
        bool((random_pairs >= -0.5).all()), f"lowest of 10^5: {random_pairs.min().item():.3f}")  # fmt: skip
    holding = (cosines[name] < -0.5).any(1).nonzero().flatten().tolist()
    neuron_rows.append({
        "model": LABEL[name], "neurons": cosines[name].numel(), "cosine < -0.5": below,
        "fraction [Wilson 95%]": f"{estimate[0]:.2%} [{estimate[1]:.2%}, {estimate[2]:.2%}]",
        "layers holding them": ", ".join(map(str, holding)) or "none",
        "most negative": cosines[name].min().item()})  # fmt: skip
pd.DataFrame(neuron_rows).style.hide(axis="index").format(precision=3)

# %% tags=["plot"] alt="Histograms on a log count scale, one per model, of every MLP neuron's cosine between its input and output weights, with -0.5 marked."
fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 3.5), squeeze=False)
for ax, name in zip(axes[0], models, strict=True):
    ax.hist(cosines[name].flatten().numpy(), bins=100, log=True)
    ax.axvline(-0.5, color="crimson", ls="--", label="-0.5")
    ax.set(xlabel="input-output cosine", ylabel="neurons", title=LABEL[name])
    ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Neurons that fire over a range of positions
#
# For every neuron of every layer, the share of its activation's variance that position
# explains ($\eta^2$, `neurons.position_shares`), over positions 2 to 63 (the BOS token and the
# first real token carry activations unlike any other). The neuron with the largest share on
# split A is measured on split B. A neuron that ignores position scores about
# $61 / (62 \cdot 64 - 1) \approx 0.015$; beside it, random neurons of its layer.


# %%
def mlp_activations(model, tokens: torch.Tensor) -> torch.Tensor:
    """Every neuron's activation: ``[layer, window, pos, neuron]``."""
    names = [f"blocks.{layer}.mlp.hook_post" for layer in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names)
    return torch.stack([cache[n].float() for n in names])


position_rows, position_curves = [], {}
for name in models:
    model = loaded[name]
    acts_a = mlp_activations(model, split_a[name])
    shares_a = torch.stack([neurons.position_shares(a) for a in acts_a])  # [layer, neuron]
    del acts_a
    layer, neuron = divmod(int(shares_a.argmax()), shares_a.shape[1])
    acts_b = mlp_activations(model, split_b[name])[layer]  # [window, pos, neuron]
    chosen = acts_b[..., neuron : neuron + 1]

    def share_of(windows: torch.Tensor, chosen=chosen) -> float:
        return neurons.position_shares(chosen[windows]).item()

    estimate = bootstrap_rows(share_of, n_windows)
    measured[f"position_neuron_{SUFFIX[name]}"] = (estimate, "share")
    generator = torch.Generator().manual_seed(seed)
    others = torch.randperm(acts_b.shape[-1], generator=generator)[:n_random_neurons]
    random_shares = neurons.position_shares(acts_b[..., others])
    position_curves[name] = (layer, neuron, chosen[..., 0])
    position_rows.append({
        "model": LABEL[name], "chosen on A": f"layer {layer}, neuron {neuron}",
        "share on A": shares_a.max().item(),
        "share on B [95% CI]": f"{estimate[0]:.2f} [{estimate[1]:.2f}, {estimate[2]:.2f}]",
        "chance": (window_length - 3) / ((window_length - 2) * n_windows - 1),
        "random neurons of its layer, median": random_shares.median().item(),
        "95th percentile": random_shares.quantile(0.95).item(),
        "neurons above 0.5 on A": int((shares_a > 0.5).sum())})  # fmt: skip
pd.DataFrame(position_rows).style.hide(axis="index").format(precision=3)

# %% tags=["plot"] alt="Line plots, one per model, of the chosen position neuron's activation against token position, mean and spread over split B's windows."
fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 3.5), squeeze=False)
for ax, name in zip(axes[0], models, strict=True):
    layer, neuron, acts = position_curves[name]
    positions = np.arange(2, window_length)
    mean, sd = acts[:, 2:].mean(0).numpy(), acts[:, 2:].std(0).numpy()
    ax.plot(positions, mean)
    ax.fill_between(positions, mean - sd, mean + sd, alpha=0.3)
    ax.set(xlabel="position", ylabel="activation (split B)",
           title=f"{LABEL[name]}: layer {layer}, neuron {neuron}")  # fmt: skip
plt.suptitle("The neuron position explains most: mean ± sd over split B's windows")
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Exercise 11.2: how much of a neuron position explains
#
# *Coding · difficulty 1 of 3 · about 10 minutes*
#
# Write the share for one neuron: `acts` is `[window, pos]`; the variance of its mean activation
# at each position (over the windows) divided by the variance of all its values (population
# variances, `unbiased=False`). Every position has the same number of windows, which is what
# makes this ratio the between-group share of the variance.


# %% tags=["starter"]
def position_share(acts: torch.Tensor) -> float:
    """acts: [window, pos] for one neuron. Var(mean per position) / Var(all values)."""
    raise NotImplementedError  # your code here


exercises.check("11.2", position_share)


# %% tags=["hide-cell", "solution"]
def position_share(acts: torch.Tensor) -> float:
    acts = acts.double()
    return (acts.mean(0).var(unbiased=False) / acts.flatten().var(unbiased=False)).item()


layer, neuron, chosen_acts = position_curves[model_name]
by_hand = position_share(chosen_acts[:, 2:])
package = neurons.position_shares(chosen_acts[:, :, None]).item()
ledger.check("a position share by hand equals neurons.position_shares",
             abs(by_hand - package) < 1e-5, f"{package:.4f}")  # fmt: skip
print(
    f"{LABEL[model_name]} layer {layer}, neuron {neuron}: {by_hand:.4f} by hand, {package:.4f} in the package"
)
assert exercises.check("11.2", position_share)

# %% [markdown]
# ## N-gram detectors: what makes an early neuron fire
#
# The Primer: most neurons of the early layers are *n-gram detectors*, and most fire on many
# different n-grams {cite:p}`voita2024neurons`. We read the first block's MLP neurons over the
# whole documentation text, cut into consecutive windows; even windows are split A, odd ones
# split B. A neuron *fires* above its own 99th percentile on A. Its *triggers* are the unigrams
# and bigrams that occur at least three times in A and make it fire at least half the time
# there (`neurons.trigger_analysis`). Two questions, on B: what share of its firings happen at
# one of its triggers (an n-gram detector: most), and how many different tokens end a trigger
# that B confirms (polysemantic: many). The chance level: the same share after A's firings are
# shuffled over A's positions, so that triggers can only arise by accident.

# %%
ngram_rows, ngram_shares = [], {}
for name in models:
    model = loaded[name]
    ids, uses_bos = all_ids[name], bos_first[name]
    body = window_length - int(uses_bos)
    text = ids[: len(ids) // body * body].view(-1, body)  # consecutive windows of the whole text
    if quick:
        text = text[:64]
    if uses_bos:
        text = torch.cat([torch.full((len(text), 1), model.tokenizer.hf.bos_token_id), text], 1)
    acts = neurons.early_activations(model, text, layer=0)  # [window, pos, d_mlp]
    text_a, text_b, acts_a, acts_b = text[0::2], text[1::2], acts[0::2], acts[1::2]
    kept_a = acts_a[:, 2:].flatten(0, 1)  # [position, neuron]: each window's first two left out
    threshold = kept_a.kthvalue(math.ceil(0.99 * len(kept_a)), dim=0).values  # [neuron]
    fires_a, fires_b = acts_a > threshold, acts_b > threshold
    del acts, acts_a, acts_b, kept_a
    found = neurons.trigger_analysis(text_a, fires_a, text_b, fires_b, model.cfg.vocab_size)
    shuffled = fires_a.clone()  # chance: A's firings moved to random positions of A
    flat = fires_a[:, 2:].reshape(-1, fires_a.shape[-1])
    order = torch.randperm(len(flat), generator=torch.Generator().manual_seed(seed))
    shuffled[:, 2:] = flat[order].view_as(fires_a[:, 2:])
    chance = neurons.trigger_analysis(text_a, shuffled, text_b, fires_b, model.cfg.vocab_size)
    included = found["firings"].sum(0) >= 10  # the criteria leave out neurons that barely fire on B

    def median_share(rows: torch.Tensor, counts: dict = found, included: torch.Tensor = included) -> float:
        at, firings = counts["at_trigger"][rows].sum(0), counts["firings"][rows].sum(0)
        shares = at[included] / firings[included].clamp_min(1)
        return shares.median().item() if len(shares) else float("nan")

    share = bootstrap_rows(median_share, len(text_b))
    measured[f"ngram_detectors_{SUFFIX[name]}"] = (share, "median share")
    counts = found["confirmed_tokens"][included].float()
    polysemy = stats.bootstrap_statistic(
        lambda c: c.median().item(), counts, n_resamples=n_resamples, seed=seed
    )
    measured[f"ngram_polysemantic_{SUFFIX[name]}"] = (polysemy, "median tokens")
    ngram_shares[name] = {
        "n-gram share": (found["at_trigger"].sum(0) / found["firings"].sum(0).clamp_min(1))[included],
        "chance (firings shuffled)": (
            chance["at_trigger"].sum(0) / chance["firings"].sum(0).clamp_min(1))[included],
        "confirmed tokens": counts,
    }  # fmt: skip
    ngram_rows.append({
        "model": LABEL[name], "windows A / B": f"{len(text_a)} / {len(text_b)}",
        "neurons (firing ≥ 10 times on B)": f"{int(included.sum())} of {len(included)}",
        "median n-gram share on B [95% CI]": share.text(fmt=".2f"),
        "chance": median_share(torch.arange(len(text_b)), chance),
        "median confirmed tokens [95% CI]": polysemy.text(fmt=".0f"),
        "neurons with none": int((counts == 0).sum()),
    })  # fmt: skip
pd.DataFrame(ngram_rows).style.hide(axis="index").format(precision=2)

# %% tags=["plot"] alt="For each model, two histograms over the first block's MLP neurons: the share of their firings on split B at a trigger n-gram found on split A, against the same share with A's firings shuffled; and how many distinct tokens end their confirmed triggers."
fig, axes = plt.subplots(len(models), 2, figsize=(10, 3.2 * len(models)), squeeze=False)
for row, name in enumerate(models):
    shares = ngram_shares[name]
    bins = np.linspace(0, 1, 26)
    for label in ("n-gram share", "chance (firings shuffled)"):
        axes[row, 0].hist(shares[label].numpy(), bins=bins, alpha=0.6, label=label)
    axes[row, 0].set(title=f"{LABEL[name]}: firings at a trigger (split B)",
                     xlabel="share of a neuron's firings", ylabel="neurons")  # fmt: skip
    axes[row, 0].legend(fontsize=8)
    top = max(int(shares["confirmed tokens"].max()), 1)
    axes[row, 1].hist(
        shares["confirmed tokens"].numpy(), bins=np.arange(0, top + 2) - 0.5 if top < 60 else 40
    )
    axes[row, 1].set(title=f"{LABEL[name]}: distinct tokens per neuron",
                     xlabel="tokens ending a confirmed trigger", ylabel="neurons")  # fmt: skip
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Neurons that promote or suppress a class of tokens
#
# A neuron's *value vector*, read through the unembedding (`neurons.value_logits`), says which
# tokens it promotes when it fires {cite:p}`geva2022promoting`. Standardised per neuron (its
# logits' mean and spread over the whole vocabulary removed,
# `neurons.standardised_value_logits`), a class of tokens that a neuron writes stands out far
# above 0. For four classes (numbers, days, months, capital cities), the neuron of any layer that
# promotes (or suppresses) the class's choosing half most is measured on its other half; beside
# it, random neurons of the same layer.

# %%
CLASSES = {"numbers": ORDINALS["numbers"], "days": ORDINALS["days"], "months": ORDINALS["months"],
           "capitals": sorted(set(behaviours.CAPITALS.values()))}  # fmt: skip
class_rows, class_halves = [], {}
for name in models:
    model = loaded[name]
    halves = {}  # class -> (choosing ids, measuring ids, measuring words)
    for label, words in CLASSES.items():
        kept = behaviours.single_token_words(model.tokenizer, words)
        if len(kept) < 6:
            continue
        order = torch.randperm(len(kept), generator=torch.Generator().manual_seed(seed)).tolist()
        kept = [kept[i] for i in order]
        ids = torch.tensor([model.tokenizer.encode(" " + w)[0] for w in kept])
        half = len(ids) // 2
        halves[label] = (ids[:half], ids[half:], kept[half:])
    class_halves[name] = halves
    scores = neurons.class_scores(model, {label: choose for label, (choose, *_) in halves.items()})
    best = {}  # (class, sign) -> (score on the choosing half, (layer, neuron)), over every layer
    for label in halves:
        for sign in (1, -1):
            signed = sign * scores[label]  # [layer, neuron]
            layer, neuron = divmod(int(signed.argmax()), signed.shape[1])
            best[label, sign] = (signed.max().item(), (layer, neuron))
    per_member = {1: [], -1: []}
    for (label, sign), (chosen_score, (layer, neuron)) in best.items():
        measure = halves[label][1]
        held = sign * neurons.standardised_value_logits(model, layer, measure, torch.tensor([neuron]))[0]
        per_member[sign].append(held)
        generator = torch.Generator().manual_seed(seed)
        others = torch.randperm(model.cfg.d_mlp, generator=generator)[:n_random_neurons]
        random_z = sign * neurons.standardised_value_logits(model, layer, measure, others).mean(1)
        class_rows.append({
            "model": LABEL[name], "class": label, "kind": "promotes" if sign == 1 else "suppresses",
            "neuron": f"layer {layer}, neuron {neuron}", "on the choosing half": chosen_score,
            "on the measuring half": held.mean().item(), "members measured": len(measure),
            "random neurons of its layer (95th pct)": random_z.quantile(0.95).item()})  # fmt: skip
    for sign, stem in ((1, "class_promoting_neuron"), (-1, "class_suppressing_neuron")):
        members = per_member[sign]  # one tensor per class
        labels = torch.cat([torch.full((len(m),), i) for i, m in enumerate(members)])
        values = torch.cat(members)

        def mean_over_classes(rows: torch.Tensor, values=values, labels=labels) -> float:
            chosen, groups = values[rows], labels[rows]
            return torch.stack([chosen[groups == g].mean() for g in groups.unique()]).mean().item()

        measured[f"{stem}_{SUFFIX[name]}"] = (
            bootstrap_rows(mean_over_classes, len(values)),
            "standardised logit",
        )
pd.DataFrame(class_rows).style.hide(axis="index").format(precision=2)

# %% [markdown]
# ### Do they, in use? Direct and total effects
#
# A value vector says what a neuron would write; whether the model uses it is a question for an
# ablation. For each class and each sign, the 10 neurons of any layer that promote (or suppress)
# its choosing half most are mean-ablated together (each activation replaced, at every position,
# by its mean over split A's text), on prompts whose answer is a member of the measuring half: the
# three items before it in its list (" Monday Tuesday Wednesday" for " Thursday") or "The capital
# of France is" for a capital. The metric is the answer's logit minus the mean logit over the
# vocabulary. Against the chosen neurons, as many random neurons of the same layers (five
# draws). Two effects of the same ablation (`neurons.ablation_effects`): the *total* effect,
# the change when the whole network runs, and the *direct* effect, what the neurons' changed
# activations write straight into the answer's logit at the last position, with every norm's
# scale frozen. Where the two differ, later layers carry the neurons' effect or undo it
# {cite:p}`mcgrath2023hydra`.
# The direct effect's share of the total is a ratio, so it is measured only where the total
# fall's interval excludes 0; elsewhere it shows as nan and its claim is inconclusive.


# %%
def class_prompts(model, label: str, words: list[str], prefix: list[int]) -> tuple[list, torch.Tensor]:
    """Prompts whose answer is one of ``words`` (members of class ``label``), and the answers."""
    prompts, answers = [], []
    for word in words:
        if label == "capitals":
            country = next(c for c, city in behaviours.CAPITALS.items() if city == word)
            text = f"The capital of {country} is"
        else:
            items = ORDINALS[label]
            i = items.index(word)
            before = (
                [items[(i - k) % len(items)] for k in (3, 2, 1)]
                if label != "numbers"
                else items[max(0, i - 3) : i]
            )
            if not before:
                continue
            text = " " + " ".join(before)
        prompts.append(torch.tensor(prefix + model.tokenizer.encode(text)))
        answers.append(model.tokenizer.encode(" " + word)[0])
    return prompts, torch.tensor(answers)


def random_neurons_like(chosen: list[tuple[int, int]], d_mlp: int, generator: torch.Generator) -> list:
    """For each chosen neuron another neuron of its layer drawn at random, none of them chosen."""
    picked = set()
    for layer, _ in chosen:
        while (draw := (layer, int(torch.randint(d_mlp, (1,), generator=generator)))) in set(chosen) | picked:
            pass
        picked.add(draw)
    return sorted(picked)


effect_rows, effect_prompts = [], {}
for name in models:
    model = loaded[name]
    halves, d_mlp = class_halves[name], model.cfg.d_mlp
    prefix = [model.tokenizer.hf.bos_token_id] if bos_first[name] else []
    scores = neurons.class_scores(model, {label: choose for label, (choose, *_) in halves.items()})
    means = neurons.mean_activations(model, split_a[name], list(range(model.cfg.n_layers)))
    generator = torch.Generator().manual_seed(seed)
    pooled = {}  # sign -> {"direct", "total", "random"}: per prompt, every class's prompts in turn
    for sign, kind in ((1, "promoting"), (-1, "suppressing")):
        pooled[sign] = {"direct": [], "total": [], "random": []}
        for label, (_, _, words) in halves.items():
            prompts, answers = class_prompts(model, label, words, prefix)
            if not prompts:
                continue
            top = [
                divmod(int(i), d_mlp) for i in (sign * scores[label]).flatten().topk(n_top_neurons).indices
            ]
            direct, total = neurons.ablation_effects(model, prompts, answers, top, means)
            draws = [random_neurons_like(top, d_mlp, generator) for _ in range(n_control_draws)]
            random_total = torch.stack(
                [neurons.ablation_effects(model, prompts, answers, draw, means)[1] for draw in draws]
            ).mean(0)
            for key, values in (("direct", direct), ("total", total), ("random", random_total)):
                pooled[sign][key].append(values)
            effect_rows.append({
                "model": LABEL[name], "class": label, "neurons": kind, "prompts": len(prompts),
                "layers": ", ".join(str(layer) for layer in sorted({layer for layer, _ in top})),
                "direct effect": direct.mean().item(), "total effect": total.mean().item(),
                "total, random neurons": random_total.mean().item(),
            })  # fmt: skip
        pooled[sign] = {key: torch.cat(values) for key, values in pooled[sign].items()}
    promoting, suppressing = pooled[1], pooled[-1]
    effect_prompts[name] = len(promoting["total"])
    measured[f"class_promoting_neurons_matter_{SUFFIX[name]}"] = (
        bootstrap_mean(promoting["random"] - promoting["total"]),
        "Δ logit",
    )  # a fall: random's change minus top's
    measured[f"class_suppressing_neurons_matter_{SUFFIX[name]}"] = (
        bootstrap_mean(suppressing["total"] - suppressing["random"]), "Δ logit")  # fmt: skip
    total_fall = bootstrap_mean(-promoting["total"])
    if total_fall.excludes(0.0):  # the share is a ratio: measured only where its denominator is clearly not 0
        share = stats.bootstrap_statistic(
            lambda d, t: (d.mean() / t.mean()).item(), -promoting["direct"], -promoting["total"],
            n_resamples=n_resamples, seed=seed)  # fmt: skip
    else:
        share = Interval(float("nan"), float("nan"), float("nan"))
    measured[f"class_neurons_act_directly_{SUFFIX[name]}"] = (share, "share")
pd.DataFrame(effect_rows).style.hide(axis="index").format(precision=2)

# %% tags=["plot"] alt="For each model, bars per class of the mean direct and total effect on the answer's centred logit of ablating the class's top 10 promoting neurons and its top 10 suppressing neurons, beside the total effect of ablating random neurons of the same layers."
effects = pd.DataFrame(effect_rows)
fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 3.6), squeeze=False)
for ax, name in zip(axes[0], models, strict=True):
    rows = effects[effects.model == LABEL[name]]
    labels = [f"{r['class']}\n{r['neurons']}" for _, r in rows.iterrows()]
    x = np.arange(len(rows))
    for offset, column in zip(
        (-0.27, 0, 0.27), ("direct effect", "total effect", "total, random neurons"), strict=True
    ):
        ax.bar(x + offset, rows[column], width=0.27, label=column)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, labels, fontsize=7)
    ax.set(
        title=f"{LABEL[name]}: ablating a class's top 10 neurons",
        ylabel="change in the answer's centred logit",
    )
    ax.legend(fontsize=7)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Anisotropy and the outlier dimensions
#
# Anisotropy is the mean cosine between the residual-stream vectors of two tokens from
# different windows (`stats.cross_window_cosine`): 0 for directions spread evenly, near 1 when
# every token points the same way. The outlier dimensions are the coordinates where some
# token's value exceeds 6 times its own RMS on split A (`stats.outlier_dims`, the scale-free
# test of the Outliers chapter). On split B: the share of the anisotropy that zeroing them
# removes, against zeroing as many other dimensions drawn at random. The claim is judged at the
# middle boundary; the figure shows every boundary, each with its own outlier dimensions.


# %%
def anisotropy_without(acts: torch.Tensor, dims: torch.Tensor) -> float:
    """Anisotropy of ``[window, pos, d]`` vectors with the coordinates ``dims`` zeroed."""
    kept = acts.clone()
    kept[..., dims] = 0.0
    return stats.cross_window_cosine(torch.nn.functional.normalize(kept, dim=-1))


anisotropy_rows, anisotropy_curves = [], {}
for name in models:
    model = loaded[name]
    names = model.resid_names()
    _, cache_a = model.run_with_cache(split_a[name], names)
    _, cache_b = model.run_with_cache(split_b[name], names)
    curve = []
    for boundary, hook in enumerate(names):
        a, b = cache_a[hook][:, 2:].float(), cache_b[hook][:, 2:].float()
        dims = stats.outlier_dims(a, 6.0, relative=True)
        full = anisotropy_without(b, dims[:0])
        curve.append({"boundary": boundary, "outliers": len(dims), "with": full,
                      "without": anisotropy_without(b, dims)})  # fmt: skip
    anisotropy_curves[name] = pd.DataFrame(curve)
    middle = names[model.cfg.n_layers // 2]  # the residual entering block n_layers // 2
    a, b = cache_a[middle][:, 2:].float(), cache_b[middle][:, 2:].float()
    del cache_a, cache_b
    dims = stats.outlier_dims(a, 6.0, relative=True)
    subset = torch.nn.functional.normalize(b[:4, :10], dim=-1)
    flat, window = subset.flatten(0, 1), torch.arange(4).repeat_interleave(10)
    brute = (flat @ flat.T)[window[:, None] != window[None, :]].mean().item()
    ledger.check(f"{LABEL[name]}: cross_window_cosine is the mean over every cross pair",
                 abs(brute - stats.cross_window_cosine(subset)) < 1e-5,
                 f"{brute:.4f}")  # fmt: skip

    def share_removed(windows: torch.Tensor, b=b, dims=dims) -> float:
        if len(dims) == 0:
            return 0.0
        chosen = b[windows]
        return 1 - anisotropy_without(chosen, dims) / anisotropy_without(chosen, dims[:0])

    estimate = bootstrap_rows(share_removed, n_windows)
    measured[f"anisotropy_outliers_{SUFFIX[name]}"] = (estimate, "share removed")
    generator = torch.Generator().manual_seed(seed)
    rest = torch.tensor([i for i in range(model.cfg.d_model) if i not in set(dims.tolist())])
    random_sets = [rest[torch.randperm(len(rest), generator=generator)[: max(len(dims), 1)]]
                   for _ in range(n_random_draws)]  # fmt: skip
    random_shares = [share_removed(torch.arange(n_windows), dims=dims_) for dims_ in random_sets]
    anisotropy_rows.append({
        "model": LABEL[name], "boundary": middle,
        "outlier dims (A)": ", ".join(map(str, dims.tolist())) or "none",
        "anisotropy (B)": anisotropy_without(b, dims[:0]),
        "without the outliers": anisotropy_without(b, dims),
        "share removed [95% CI]": f"{estimate[0]:.2f} [{estimate[1]:.2f}, {estimate[2]:.2f}]",
        "as many random dims remove": float(np.mean(random_shares))})  # fmt: skip
pd.DataFrame(anisotropy_rows).style.hide(axis="index").format(precision=3)

# %% tags=["plot"] alt="Line plots, one per model, of the mean cosine between tokens of different windows at every layer boundary, with all dimensions and with the outlier dimensions zeroed."
fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 3.5), squeeze=False)
for ax, name in zip(axes[0], models, strict=True):
    curve = anisotropy_curves[name]
    ax.plot(curve["boundary"], curve["with"], marker="o", ms=3, label="all dimensions")
    ax.plot(curve["boundary"], curve["without"], marker="o", ms=3, label="outlier dimensions zeroed")
    ax.axvline(loaded[name].cfg.n_layers // 2, color="grey", ls=":", lw=1)
    ax.set(xlabel="layer boundary", ylabel="mean cross-window cosine (B)", title=LABEL[name], ylim=(-0.05, 1))
    ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Exercise 11.3: anisotropy without the pairs
#
# *Predict, then code and check · difficulty 2 of 3 · about 15 minutes*
#
# First predict: zeroing 16 coordinates drawn at random from SmolLM2's 576, does the anisotropy
# change much? Then write the anisotropy of unit vectors `[window, token, d]`: the mean cosine
# over every pair of tokens from *different* windows. Forming all pairs is fine here; the
# package's version (`stats.cross_window_cosine`) never forms them: the squared norm of the sum of
# all vectors, less each window's own, counts every cross pair twice.

# %% tags=["starter"]
exercises.predict("11.3", ...)  # "yes" or "no"


def cross_window_cosine(unit: torch.Tensor) -> float:
    """unit: [window, token, d], each vector of norm 1. The mean cosine over cross-window pairs."""
    raise NotImplementedError  # your code here


exercises.check("11.3", cross_window_cosine)


# %% tags=["hide-cell", "solution"]
def cross_window_cosine(unit: torch.Tensor) -> float:
    flat = unit.double().flatten(0, 1)  # [window * token, d]
    window = torch.arange(unit.shape[0]).repeat_interleave(unit.shape[1])
    cosines = flat @ flat.T
    return cosines[window[:, None] != window[None, :]].mean().item()


exercises.predict("11.3", "no")
sample = torch.nn.functional.normalize(b[:8], dim=-1)  # the last model's middle boundary, split B
by_hand, package = cross_window_cosine(sample), stats.cross_window_cosine(sample)
ledger.check("an anisotropy by hand equals stats.cross_window_cosine",
             abs(by_hand - package) < 1e-9, f"{package:.4f}")  # fmt: skip
assert exercises.check("11.3", cross_window_cosine)

# %% [markdown]
# ## The direct path as bigram statistics, copying set aside
#
# The path from the embedding straight to the unembedding, every block skipped, is often read as
# the model's bigram statistics. Both models here tie their embedding and unembedding, so the
# direct path's favourite next token is the current token itself (its embedding has the largest
# dot product with itself): asked naively, the question measures copying. So every ranking here
# leaves the current token out. For each of the text's most frequent tokens: is the direct path's
# top next token (other than the current one) a most frequent follower of it in the text
# (`heads.bigram_hits_without_copying`)? The baseline knows no bigrams: it predicts the text's
# most frequent token other than the current one.

# %%
direct_rows = []
for name in models:
    model = loaded[name]
    frequent = torch.bincount(all_ids[name]).topk(n_frequent).indices
    direct_hits, baseline_hits = heads.bigram_hits_without_copying(model, all_ids[name], frequent)
    difference = stats.bootstrap_statistic(
        lambda d, b: (d.float().mean() - b.float().mean()).item(), direct_hits, baseline_hits,
        n_resamples=n_resamples, seed=seed,
    )  # fmt: skip
    measured[f"direct_path_bigrams_no_copy_{SUFFIX[name]}"] = (difference, "rate difference")
    copies = torch.cat(
        [heads.direct_path_logits(model, part).argmax(-1) == part for part in frequent.split(100)]
    )
    direct_rows.append({
        "model": LABEL[name], "frequent tokens": len(frequent),
        "direct path's top is the token itself": copies.float().mean().item(),
        "direct path hits (itself left out)": direct_hits.float().mean().item(),
        "unigram baseline hits": baseline_hits.float().mean().item(),
        "difference [95% CI]": difference.text(fmt=".2f"),
    })  # fmt: skip
pd.DataFrame(direct_rows).style.hide(axis="index").format(precision=2)

# %% [markdown]
# ## The last layer's frequency bias
#
# Kobayashi et al. found that GPT-2's last layer norm shifts every prediction towards frequent
# tokens. Neither model here has a bias anywhere, so the test is on the behaviour: the last
# block's direct contribution to the logits (its attention and MLP outputs, through the final
# norm's scale of the whole stream and the unembedding), averaged over positions, against each
# token's log count in the pydoc text, over the tokens seen there at least 3 times: a Spearman
# correlation. The middle block, measured the same way, is the comparison. The pydoc counts
# stand in for the training corpus's, which we do not have.


# %%
def direct_logits_per_window(model, tokens: torch.Tensor, layer: int, token_ids: torch.Tensor):
    """Block ``layer``'s direct contribution to the logits of ``token_ids``, averaged over
    positions 2 onwards of each window: ``[window, token]``."""
    names = [f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.hook_resid_post", model.resid_names()[-1]]
    _, cache = model.run_with_cache(tokens, names)
    written = (cache[names[1]] - cache[names[0]]).float()[:, 2:]  # [window, pos, d]
    scale = model.ln_final.scale(cache[names[2]].float()[:, 2:])  # [window, pos, 1]
    per_window = (written / scale).mean(1)  # linear from here on: the mean commutes with the read-out
    with torch.no_grad():
        return model.direction_logits(per_window)[:, token_ids].float()


frequency_rows = []
for name in models:
    model = loaded[name]
    counts = torch.bincount(all_ids[name], minlength=model.cfg.vocab_size)
    seen = (counts >= 3).nonzero().flatten()
    log_count = counts[seen].double().log()
    per_block = {}
    for label, layer in (("last block", model.cfg.n_layers - 1), ("middle block", model.cfg.n_layers // 2)):
        logits = direct_logits_per_window(model, split_b[name], layer, seen)

        def correlation(windows: torch.Tensor, logits=logits, log_count=log_count) -> float:
            return stats.spearman(logits[windows].mean(0), log_count)

        per_block[label] = bootstrap_rows(correlation, n_windows)
    measured[f"frequency_bias_{SUFFIX[name]}"] = (per_block["last block"], "Spearman ρ")
    frequency_rows.append({
        "model": LABEL[name], "tokens seen ≥ 3 times": len(seen),
        **{f"{label} ρ [95% CI]": f"{v[0]:+.2f} [{v[1]:+.2f}, {v[2]:+.2f}]"
           for label, v in per_block.items()}})  # fmt: skip
pd.DataFrame(frequency_rows).style.hide(axis="index")

# %% [markdown]
# ## Function vectors
#
# Todd et al. found that a few heads, reading in-context examples of a task ("hot: cold, big:
# small, ..."), write at the last position a vector that carries the task: their summed mean
# outputs, the *function vector*, added to a prompt with no examples at all, makes the model do
# the task. The recipe (`resid.function_vectors`), on four tasks written for this book:
#
# 1. **Positive control.** A task counts only where the model does it in context: 10-shot
#    top-1 accuracy of at least 0.5 on the selection items.
# 2. **Which heads** (selection items only): each head's *average indirect effect*, the rise in
#    the answer's probability when its output at the last position of a prompt whose ten labels
#    were shuffled is replaced by its mean over clean prompts of the task; averaged over the
#    counted tasks, the top 10 heads.
# 3. **The test** (held-out items only): zero-shot prompts, "Q: x\nA:", with the task's function
#    vector added to the residual at the last position at boundary $L/3$, against the same
#    prompts without it and with a random vector of the same norm.

# %%
fv_rows, fv_effects, fv_results, fv_heads = [], {}, {}, {}
for name in models:
    model = loaded[name]
    prefix = behaviours.bos_prefix(model.tokenizer)
    boundary = model.cfg.n_layers // 3
    prompts = {}
    for task, pairs in function_vectors.FV_TASKS.items():
        usable = function_vectors.usable_pairs(model.tokenizer, pairs)
        order = random.Random(seed).sample(usable, len(usable))
        selection, held_out = order[: len(order) // 2], order[len(order) // 2 :]
        row = {"model": LABEL[name], "task": task, "usable pairs": len(usable), "selection": len(selection),
               "held out": len(held_out)}  # fmt: skip
        if len(selection) < 11:
            fv_rows.append(row | {"10-shot accuracy (selection)": np.nan, "counted": False})
            continue
        clean, answers = function_vectors.icl_prompts(
            model.tokenizer, selection, selection, 10, seed, prefix=prefix
        )
        accuracy = function_vectors.top1_hits(model, clean, answers).mean().item()
        fv_rows.append(row | {"10-shot accuracy (selection)": accuracy, "counted": accuracy >= 0.5})
        if accuracy >= 0.5:
            prompts[task] = (selection, held_out, clean, answers)
    if quick:  # CI's quick run: two tasks, a few prompts each
        prompts = dict(list(prompts.items())[:2])
    effects = []
    for selection, _, clean, answers in prompts.values():
        queries = selection[:3] if quick else selection
        clean, answers = clean[: len(queries)], answers[: len(queries)]  # the same demonstrations, in order
        corrupted, _ = function_vectors.icl_prompts(
            model.tokenizer, selection, queries, 10, seed, shuffle_labels=True, prefix=prefix)  # fmt: skip
        mean_z = function_vectors.mean_head_z(model, clean)
        effects.append(function_vectors.average_indirect_effect(model, corrupted, answers, mean_z))
    if not effects:
        measured[f"function_vector_{SUFFIX[name]}"] = ((np.nan, np.nan, np.nan), "Δ accuracy")
        measured[f"function_vector_not_any_vector_{SUFFIX[name]}"] = ((np.nan, np.nan, np.nan), "Δ accuracy")
        continue
    fv_effects[name] = torch.stack(effects).mean(0)  # [layer, head]
    top = fv_effects[name].flatten().topk(10).indices
    fv_heads[name] = [divmod(int(i), model.cfg.n_heads) for i in top]
    gains_none, gains_random, per_task = [], [], []
    generator = torch.Generator().manual_seed(seed)
    for task, (selection, held_out, clean, _) in prompts.items():
        vector = function_vectors.function_vector(model, clean, fv_heads[name])
        zero, answers = function_vectors.icl_prompts(
            model.tokenizer, selection, held_out, 0, seed, prefix=prefix
        )
        shots, _ = function_vectors.icl_prompts(model.tokenizer, selection, held_out, 10, seed, prefix=prefix)
        _, at_boundary = model.run_with_cache(zero, [f"blocks.{boundary}.hook_resid_pre"])
        residual_norm = at_boundary[f"blocks.{boundary}.hook_resid_pre"][:, -1].norm(dim=-1).mean().item()
        hits = function_vectors.zero_shot_hits(model, zero, answers, boundary, vector, generator=generator)
        plain, with_fv, with_random = hits["plain"], hits["vector"], hits["random"]
        gains_none.append(with_fv - plain)
        gains_random.append(with_fv - with_random)
        per_task.append({"model": LABEL[name], "task": task, "held-out items": len(held_out),
                         "zero-shot": plain.mean().item(), "+ random vector": with_random.mean().item(),
                         "+ function vector": with_fv.mean().item(),
                         "10-shot": function_vectors.top1_hits(model, shots, answers).mean().item(),
                         "‖FV‖": vector.norm().item(),
                         "‖FV‖ / ‖residual there‖": vector.norm().item() / residual_norm})  # fmt: skip
    fv_results[name] = per_task
    measured[f"function_vector_{SUFFIX[name]}"] = (bootstrap_mean(torch.cat(gains_none)), "Δ accuracy")
    measured[f"function_vector_not_any_vector_{SUFFIX[name]}"] = (
        bootstrap_mean(torch.cat(gains_random)), "Δ accuracy")  # fmt: skip
display(pd.DataFrame(fv_rows).style.hide(axis="index").format(precision=2))
pd.DataFrame([r for rows in fv_results.values() for r in rows]).style.hide(axis="index").format(precision=2)

# %% tags=["plot"] alt="Heatmaps over layer and head, one per model, of each head's average indirect effect on in-context tasks (the function-vector heads)."
if fv_effects:
    fig, axes = plt.subplots(1, len(fv_effects), figsize=(5.5 * len(fv_effects), 3.8), squeeze=False)
    for ax, (name, effect) in zip(axes[0], fv_effects.items(), strict=True):
        sns.heatmap(effect.T.numpy(), ax=ax, cmap="RdBu_r", center=0)
        ax.set(title=f"{LABEL[name]}: average indirect effect", xlabel="layer", ylabel="head")
    plt.tight_layout()
    plt.show()
    display(Markdown("The top 10 heads: " + "; ".join(
        f"{LABEL[name]} " + ", ".join(f"L{layer}H{head}" for layer, head in chosen)
        for name, chosen in fv_heads.items())))  # fmt: skip

# %% [markdown]
# A gain with an interval of zero width is no rounding: where neither the zero-shot prompt nor
# the prompt with the function vector added gets any held-out item right (the table's two
# columns at 0 for every task), every item's gain is 0 and so is every resample's mean. The
# vector then did nothing measurable, and the row says that exactly.

# %% [markdown]
# ### A task the heads were not chosen on: the next item of a sequence
#
# The Primer's list of function-vector tasks includes giving the next item of a sequence
# ("Monday" → "Tuesday"). Here it is a fifth task with criteria of its own, committed before
# this code: number words, days, months and letters (`function_vectors.NEXT_ITEM`), split at
# random into selection and held-out halves as above, with the same positive control. The heads
# are **not** chosen again: the vector is the sum of the mean outputs of the 10 heads chosen
# above on the other four tasks, over this task's clean 10-shot selection prompts. So the test
# asks whether those heads carry a task they were not chosen on, again on held-out zero-shot
# prompts, against no vector and against random vectors of its norm.

# %%
next_item_rows = []
for name in models:
    model = loaded[name]
    prefix = behaviours.bos_prefix(model.tokenizer)
    boundary = model.cfg.n_layers // 3
    usable = function_vectors.usable_pairs(model.tokenizer, function_vectors.NEXT_ITEM)
    order = random.Random(seed).sample(usable, len(usable))
    selection, held_out = order[: len(order) // 2], order[len(order) // 2 :]
    row = {"model": LABEL[name], "usable pairs": len(usable), "selection": len(selection),
           "held out": len(held_out)}  # fmt: skip
    accuracy = np.nan
    if len(selection) >= 11 and name in fv_heads:
        clean, answers = function_vectors.icl_prompts(
            model.tokenizer, selection, selection, 10, seed, prefix=prefix
        )
        accuracy = function_vectors.top1_hits(model, clean, answers).mean().item()
    row["10-shot accuracy (selection)"] = accuracy
    if not accuracy >= 0.5:  # the positive control failed (or could not run): not measured
        next_item_rows.append(row)
        for stem in ("function_vector_next_item", "function_vector_next_item_not_any_vector"):
            measured[f"{stem}_{SUFFIX[name]}"] = ((np.nan, np.nan, np.nan), "Δ accuracy")
        continue
    vector = function_vectors.function_vector(model, clean, fv_heads[name])
    zero, answers = function_vectors.icl_prompts(model.tokenizer, selection, held_out, 0, seed, prefix=prefix)
    shots, _ = function_vectors.icl_prompts(model.tokenizer, selection, held_out, 10, seed, prefix=prefix)
    hits = function_vectors.zero_shot_hits(model, zero, answers, boundary, vector,
                                           generator=torch.Generator().manual_seed(seed))  # fmt: skip
    in_context = function_vectors.top1_hits(model, shots, answers).mean().item()
    next_item_rows.append(row | {"10-shot (held out)": in_context, "zero-shot": hits["plain"].mean().item(),
                                 "+ random vector": hits["random"].mean().item(),
                                 "+ function vector": hits["vector"].mean().item()})  # fmt: skip
    measured[f"function_vector_next_item_{SUFFIX[name]}"] = (
        bootstrap_mean(hits["vector"] - hits["plain"]), "Δ accuracy")  # fmt: skip
    measured[f"function_vector_next_item_not_any_vector_{SUFFIX[name]}"] = (
        bootstrap_mean(hits["vector"] - hits["random"]), "Δ accuracy")  # fmt: skip
pd.DataFrame(next_item_rows).style.hide(axis="index").format(precision=2)

# %% [markdown]
# ## Neurons that tell what the input is: task neurons and concept neurons
#
# The Primer's list of input behaviours ends with two kinds of neuron read by when they fire,
# not by what they write: neurons whose activation *predicts the task* a prompt sets, and
# *concept neurons*, which fire for the members of a class of words. Both are tested the way
# the rest of this chapter tests a kind: every neuron of every layer (`mlp.hook_post`) is a
# candidate, the one that best separates its positives from its negatives on split A is chosen,
# and it is measured on split B, which shares no word with A. The score is an AUROC, the
# probability that a positive item's activation exceeds a negative one's (0.5 by chance, 1 for
# perfect separation; `stats.one_vs_rest_auroc`), with a bootstrap over B's items that resamples
# each task's (or class's) items among themselves (`stats.stratified_bootstrap`). Beside each
# chosen neuron, 200 random neurons of its layer asked the same question: where a neuron
# chosen by chance would land. On splits this small many neurons separate A perfectly (the
# table's "tied on A"); the criteria leave ties open, and the one chosen among them is the neuron
# whose positives and negatives lie furthest apart on A, in units of its spread: a rule that
# reads A alone, where taking the first would favour layer 0 by the order of the list.
#
# - **Task neurons.** The four in-context tasks of the function-vector section, each task's
#   usable pairs halved as there. A prompt is 5 demonstrations and a query, "Q: x\nA: y" (A's
#   prompts draw both from A's halves, B's from B's), read at its last position, where the model
#   is about to answer. A task's prompts are its positives, the other tasks' its negatives. A
#   task enters only where each half holds 6 usable pairs (5 demonstrations besides the query),
#   an amendment committed before any of this section's code (9225ed4). The query's own word is
#   in the prompt too, so a neuron may tell the task from the query alone (english_french and
#   uppercase share input words; the other tasks do not).
# - **Concept neurons.** The four classes of the class-neuron section (numbers, days, months,
#   capital cities), halved as there, each member read at its own position in four neutral
#   sentences; its class's members are its positives, the other classes' members of the same
#   split its negatives. B's positives are members no choice saw.

# %%
TASK_MIN_PAIRS = 6  # per half: 5 demonstrations besides the query's own pair
CONCEPT_SENTENCES = ("I wrote {} on the card.", "The next word is {} and nothing else.", "She said {} twice.",
                     "Here {} appears in a sentence.")  # fmt: skip


def task_prompts(model, prefix: list[int]) -> tuple[dict, list[str]]:
    """Each split's 5-shot prompts, every counted task's in turn: ``{"A" | "B": (tokens, labels)}``."""
    splits, counted = {"A": ([], []), "B": ([], [])}, []
    for task, pairs in function_vectors.FV_TASKS.items():
        usable = function_vectors.usable_pairs(model.tokenizer, pairs)
        order = random.Random(seed).sample(usable, len(usable))  # the function-vector section's halves
        halves = {"A": order[: len(order) // 2], "B": order[len(order) // 2 :]}
        if min(len(half) for half in halves.values()) < TASK_MIN_PAIRS:
            continue
        for split, half in halves.items():
            queries = half[:8] if quick else half
            tokens, _ = function_vectors.icl_prompts(model.tokenizer, half, queries, 5, seed, prefix=prefix)
            splits[split][0].append(tokens)
            splits[split][1].append(torch.full((len(tokens),), len(counted)))
        counted.append(task)
    return {split: (torch.cat(t), torch.cat(labels)) for split, (t, labels) in splits.items()}, counted


def concept_items(model, members: list[torch.Tensor], prefix: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Every member (one token id each, a list per class) at its own position in every neutral
    sentence: ``(activations [item, layer, neuron], labels [item])``."""
    acts, labels = [], []
    for sentence in CONCEPT_SENTENCES:
        before, after = sentence.split("{}")
        head, tail = prefix + model.tokenizer.encode(before.rstrip()), model.tokenizer.encode(after)
        rows = [head + [int(i)] + tail for ids in members for i in ids]
        acts.append(neurons.activations_at(model, torch.tensor(rows), position=len(head)))
        labels.append(torch.cat([torch.full((len(ids),), c) for c, ids in enumerate(members)]))
    return torch.cat(acts), torch.cat(labels)


def choose_and_measure(
    acts_a, labels_a, acts_b, labels_b, names: list[str], generator
) -> tuple[Interval, list]:
    """For each label, the neuron (any layer) with the largest one-vs-rest AUROC on A, measured on
    B: the mean over labels with its stratified bootstrap, and a row per label."""
    d_mlp, flat_a = acts_a.shape[-1], acts_a.flatten(1)  # [item, layer * neuron]
    on_a = stats.one_vs_rest_auroc(flat_a, labels_a)  # [label, layer * neuron]
    top = on_a == on_a.max(1, keepdim=True).values  # ties at the top are common on a small split
    gaps = torch.stack(
        [flat_a[labels_a == g].mean(0) - flat_a[labels_a != g].mean(0) for g in range(len(names))]
    )
    separation = gaps / (flat_a.std(0) + 1e-6)  # [label, layer * neuron]: on A alone, the tie-break
    chosen = torch.where(top, separation, -torch.inf).argmax(1)  # [label]
    columns = acts_b.flatten(1)[:, chosen]  # [item, label]: each label's chosen neuron

    def mean_auroc(rows: torch.Tensor) -> float:
        return stats.one_vs_rest_auroc(columns[rows], labels_b[rows]).diagonal().mean().item()

    rows = []
    on_b = stats.one_vs_rest_auroc(columns, labels_b).diagonal()
    for label, (index, name) in enumerate(zip(chosen.tolist(), names, strict=True)):
        layer, neuron = divmod(index, d_mlp)
        others = torch.randperm(d_mlp, generator=generator)[:n_random_neurons]
        chance = stats.one_vs_rest_auroc(acts_b[:, layer, others], labels_b)[label]  # [random neuron]
        rows.append({"for": name, "neuron": f"layer {layer}, neuron {neuron}",
                     "AUROC on A": on_a[label, index].item(), "tied on A": int(top[label].sum()),
                     "AUROC on B": on_b[label].item(),
                     "positives on B": int((labels_b == label).sum()),
                     "random neurons of its layer: median": chance.median().item(),
                     "95th pct": chance.quantile(0.95).item()})  # fmt: skip
    return stats.stratified_bootstrap(mean_auroc, labels_b, n_resamples, seed=seed), rows


input_rows, input_tasks = [], {}
for name in models:
    model = loaded[name]
    prefix = behaviours.bos_prefix(model.tokenizer)
    generator = torch.Generator().manual_seed(seed)
    splits, counted = task_prompts(model, prefix)
    input_tasks[name] = counted
    (tokens_a, labels_a), (tokens_b, labels_b) = splits["A"], splits["B"]
    interval, rows = choose_and_measure(
        neurons.activations_at(model, tokens_a), labels_a, neurons.activations_at(model, tokens_b), labels_b,
        counted, generator)  # fmt: skip
    measured[f"task_neuron_{SUFFIX[name]}"] = (interval, "AUROC")
    input_rows += [{"model": LABEL[name], "kind": "task"} | row for row in rows]
    halves = class_halves[name]  # class -> (choosing ids, measuring ids, measuring words)
    acts_a, labels_a = concept_items(model, [choose for choose, *_ in halves.values()], prefix)
    acts_b, labels_b = concept_items(model, [measure for _, measure, _ in halves.values()], prefix)
    interval, rows = choose_and_measure(acts_a, labels_a, acts_b, labels_b, list(halves), generator)
    measured[f"concept_neuron_{SUFFIX[name]}"] = (interval, "AUROC")
    input_rows += [{"model": LABEL[name], "kind": "concept"} | row for row in rows]
    del acts_a, acts_b
pd.DataFrame(input_rows).style.hide(axis="index").format(precision=2)

# %% tags=["plot"] alt="For each model, bars per task and per class of the chosen neuron's AUROC on split B, with the median and 95th percentile of 200 random neurons of its layer marked, and 0.5 (chance) and 0.9 (the criterion) drawn across."
inputs = pd.DataFrame(input_rows)
fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 3.6), squeeze=False)
for ax, name in zip(axes[0], models, strict=True):
    rows = inputs[inputs.model == LABEL[name]]
    x = np.arange(len(rows))
    ax.bar(x, rows["AUROC on B"], color=["tab:blue" if k == "task" else "tab:orange" for k in rows.kind])
    ax.scatter(
        x,
        rows["random neurons of its layer: median"],
        color="black",
        marker="_",
        s=200,
        label="random: median",
    )
    ax.scatter(x, rows["95th pct"], color="grey", marker="v", label="random: 95th pct")
    for level, style in ((0.5, ":"), (0.9, "--")):
        ax.axhline(level, color="black", linestyle=style, linewidth=0.8)
    ax.set_xticks(x, [f"{r['for']}\n({r['kind']})" for _, r in rows.iterrows()], fontsize=7)
    ax.set(title=f"{LABEL[name]}: the chosen neuron on split B", ylabel="AUROC", ylim=(0, 1.02))
    ax.legend(fontsize=7, loc="lower right")
plt.tight_layout()
plt.show()

# %% [markdown]
# How to read an AUROC of 1 with an interval of [1, 1]: it is no rounding. Every one of B's
# positives outranks every one of its negatives, so every resample of B's items does too; the
# interval says B holds no counterexample, and with a few dozen positives per task or class it
# cannot say that the separation is perfect beyond them. What tempers a verdict is the grey
# marker beside its bar: where random neurons of the same layer land near the chosen one, the
# task or the class can be read from much of that layer, and the chosen neuron is the best of
# many good ones (the table's "tied on A" counts them). The Primer's claim is that such neurons
# exist, which these rows test; that they are rare is a different claim, and where the markers
# sit high these rows speak against it (the sceptic's notes below name each such row).

# %% [markdown]
# ## Context retrieval: the request first, the entity later
#
# Variengien and Winsor decompose retrieving an answer from the context into two steps: the
# model first processes the *request* (which person is asked about), then late heads *fetch*
# the entity from the context. Here: three people and the cities they live in (assigned at
# random, so that knowledge cannot answer), then a question about one of them
# (`behaviours.retrieval_prompts`); the counterfactual asks about another of the three. Where
# is the request processed? Patching the residual stream at the asked name's position, boundary
# by boundary, swings the answer only while the request still lives there. Where is the entity
# fetched? The heads with the largest direct effect on the answer-foil logit difference at the
# last position (`attribution.component_attributions`).

# %%
retrieval_rows, retrieval_curves, retrieval_heads = [], {}, {}
for name in models:
    model = loaded[name]
    prompts = behaviours.retrieval_prompts(model.tokenizer, n_retrieval, seed)
    metric = metrics.LogitDiff(prompts.answers, prompts.foils)
    clean = metric(model(prompts.tokens)[:, -1])
    swapped = metric(model(prompts.counterfactual)[:, -1])
    accuracy = (clean > 0).float().mean().item()
    request = prompts.positions["request"]
    same_place = bool((request == request[0]).all())
    ledger.check(f"{LABEL[name]}: every retrieval prompt asks at the same position",
                 same_place, f"position {request[0].item()}")  # fmt: skip
    row = {"model": LABEL[name], "prompts": len(prompts), "answer preferred": accuracy,
           "logit difference": clean.mean().item(), "counterfactual's": swapped.mean().item()}  # fmt: skip
    if accuracy < 0.5:  # the positive control fails: nothing to decompose
        measured[f"retrieval_after_request_{SUFFIX[name]}"] = ((np.nan, np.nan, np.nan), "share of depth")
        retrieval_rows.append(row)
        continue
    patched = patching.patch_residual(model, prompts.tokens, prompts.counterfactual, metric, per_prompt=True)
    at_request = patched[:, request[0]]  # [boundary, prompt]
    labels, contributions, bias_term = attribution.component_attributions(
        model, prompts.tokens, prompts.answers, prompts.foils)  # fmt: skip
    total = contributions.sum(0) + bias_term
    ledger.check(f"{LABEL[name]}: the direct effects sum to the logit difference",
                 torch.allclose(total, clean, atol=1e-2, rtol=1e-3),
                 f"largest gap {(total - clean).abs().max().item():.1e}")  # fmt: skip
    head_rows = [i for i, label in enumerate(labels) if re.fullmatch(r"L\d+H\d+", label)]
    head_effects = contributions[head_rows]  # [head, prompt]
    head_layers = torch.tensor([int(re.match(r"L(\d+)", labels[i]).group(1)) for i in head_rows])
    n_layers = model.cfg.n_layers

    def request_boundary(rows: torch.Tensor, at_request=at_request, clean=clean, swapped=swapped) -> int:
        moved = (at_request[:, rows].mean(1) - clean[rows].mean()) / (
            swapped[rows].mean() - clean[rows].mean()
        )
        below = (moved < 0.5).nonzero()
        return int(below[0]) if len(below) else len(moved)

    def retrieval_boundary(rows: torch.Tensor, head_effects=head_effects, head_layers=head_layers) -> float:
        top = head_effects[:, rows].mean(1).topk(5).indices
        return (head_layers[top] + 1).float().median().item()

    def gap(rows: torch.Tensor, n_layers=n_layers) -> float:
        return (retrieval_boundary(rows) - request_boundary(rows)) / n_layers

    everyone = torch.arange(len(prompts))
    measured[f"retrieval_after_request_{SUFFIX[name]}"] = (
        bootstrap_rows(gap, len(prompts)),
        "share of depth",
    )
    moved_all = (at_request.mean(1) - clean.mean()) / (swapped.mean() - clean.mean())
    retrieval_curves[name] = (moved_all, head_effects.mean(1), head_layers)
    top = head_effects.mean(1).topk(5).indices
    retrieval_heads[name] = [labels[head_rows[i]] for i in top]
    retrieval_rows.append(row | {"request leaves its position at boundary": request_boundary(everyone),
                                 "fetching heads (top 5 by direct effect)": ", ".join(retrieval_heads[name]),
                                 "their median boundary": retrieval_boundary(everyone),
                                 "layers": n_layers})  # fmt: skip
pd.DataFrame(retrieval_rows).style.hide(axis="index").format(precision=2)

# %% tags=["plot"] alt="Panels, one per model, against layer boundary: the share of the answer's swing moved by patching the request there, with bars of the heads' positive direct effect per layer."
if retrieval_curves:
    fig, axes = plt.subplots(
        1, len(retrieval_curves), figsize=(5.5 * len(retrieval_curves), 3.6), squeeze=False
    )
    for ax, (name, (moved, effects, layers)) in zip(axes[0], retrieval_curves.items(), strict=True):
        ax.plot(
            np.arange(len(moved)), moved.numpy(), marker="o", ms=3, label="patch at the request: share moved"
        )
        per_layer = torch.zeros(len(moved)).index_add_(0, layers, effects.clamp_min(0))
        ax2 = ax.twinx()
        ax2.bar(np.arange(len(moved)) + 1, per_layer.numpy(), color="tab:orange", alpha=0.4,
                label="heads' positive direct effect")  # fmt: skip
        ax.axhline(0.5, color="grey", ls=":", lw=1)
        ax.set(xlabel="boundary", ylabel="share of the swing moved", title=LABEL[name])
        ax2.set_ylabel("direct effect (logit difference)")
        ax.legend(loc="upper right", fontsize=8)
    plt.tight_layout()
    plt.show()

# %% [markdown]
# ## Checks
#
# The identities and sanity properties asserted along the way (a failing one stops the
# chapter). They are never counted as reproductions.

# %% tags=["checks"]
ledger.checks_table()

# %% [markdown]
# (claims-catalogue)=
# ## The Primer's catalogue, judged against its criteria
#
# Each row: the claim, its source, our estimate with its 95% interval (a bootstrap over split
# B's windows, over the measured items or tokens, or of the choice; Wilson's for the fraction
# of neurons), the criterion in `notebooks/criteria/catalogue.toml`, and the verdict.

# %%
for key in ledger.criteria:
    if key in measured:  # a quick run measures one model
        interval, what = measured[key]
        ledger.judge(key, interval, what)
ledger.claims_table()

# %% [markdown]
# **Takeaways**, computed from the rows above.

# %% tags=["prose"]
verdicts, estimates = ledger.verdicts, ledger.estimates


def per_model(stem: str, fmt: str = ".2f") -> str:
    return "; ".join(f"{LABEL[name]} {estimates[f'{stem}_{SUFFIX[name]}']:{fmt}} "
                     f"({verdicts[f'{stem}_{SUFFIX[name]}']})" for name in models)  # fmt: skip


display(Markdown(
    f"- **Positional heads.** The best previous-token head, measured on text that did not choose it: "
    f"{per_model('previous_token_head')}. The best self-attending head: {per_model('self_head')}. The best "
    f"next-token head of the bidirectional MiniLM-L6: {estimates['next_token_head_minilm']:.2f} "
    f"({verdicts['next_token_head_minilm']}).\n"
    "- **Subword joiners**, beyond what attending to the previous token gives: "
    f"{per_model('subword_joiner')}. Ablating the top three costs word-continuing tokens this many times "
    f"what three random heads cost: {per_model('joiner_heads_matter', '.1f')}.\n"
    "- **Syntactic heads**, from the last word to the subject it agrees with (chosen on some nouns, measured "
    f"on others): {per_model('syntactic_head')}. Mean-ablating the top three lowers the agreeing verb's "
    "margin by this much more than three random heads of their layers: "
    f"{per_model('syntactic_heads_matter', '+.2f')}.\n"
    f"- **OV circuits.** Successor heads chosen on numbers and letters, measured on days and months: "
    f"{per_model('successor_head')}. Copying heads on unseen tokens: {per_model('copying_head')}.\n"
    "- **Heads at work.** Mean-ablating the top three of a kind costs this many nats more than three random "
    f"heads of their layers: previous-token heads, on the repeat of a random sequence, "
    f"{per_model('previous_token_heads_matter', '+.2f')}; copying heads there, "
    f"{per_model('copying_heads_matter', '+.2f')}; successor heads, on the next day or month, "
    f"{per_model('successor_heads_matter', '+.2f')}.\n"
    f"- **Memory management.** The most self-attending head's eigenvalue sign: "
    f"{per_model('erasing_self_head', '+.2f')}. Neurons with an input-output cosine below -0.5: "
    f"{per_model('erasing_neurons', '.2%')}.\n"
    f"- **Position neurons** (share of variance position explains): {per_model('position_neuron')}.\n"
    "- **Class neurons**, the standardised logit a class's best neuron writes for its unseen members: "
    f"promoting {per_model('class_promoting_neuron')}; suppressing {per_model('class_suppressing_neuron')}. "
    "In use, mean-ablating a class's top 10 lowers a member's logit where it is the answer by this much "
    f"more than random neurons of their layers: {per_model('class_promoting_neurons_matter', '+.2f')}; the "
    f"top 10 suppressors raise it by {per_model('class_suppressing_neurons_matter', '+.2f')}; the share of "
    f"the promoters' total effect that they write directly: {per_model('class_neurons_act_directly')}.\n"
    "- **Input neurons**, the chosen neuron's AUROC on new items (0.5 by chance), averaged over tasks "
    f"or classes: telling the task of a 5-shot prompt {per_model('task_neuron')}; a concept's unseen "
    f"members from other classes' {per_model('concept_neuron')}.\n"
    "- **N-gram detectors** in the first block, the median share of a neuron's firings on new text at an "
    f"n-gram that made it fire before: {per_model('ngram_detectors')}; the median number of distinct tokens "
    f"ending its confirmed triggers: {per_model('ngram_polysemantic', '.0f')}.\n"
    "- **The direct path**, its top next token other than the current one against the bigram top, over the "
    f"unigram baseline: {per_model('direct_path_bigrams_no_copy', '+.2f')}.\n"
    "- **Anisotropy** removed by zeroing the outlier dimensions: "
    f"{per_model('anisotropy_outliers', '.0%')}.\n"
    "- **Frequency bias** of the last block (Spearman ρ with log frequency): "
    f"{per_model('frequency_bias', '+.2f')}.\n"
    "- **Function vectors**, zero-shot accuracy gained on held-out items over no vector: "
    f"{per_model('function_vector', '+.0%')}; over a random vector of the same norm: "
    f"{per_model('function_vector_not_any_vector', '+.0%')}. On the next item of a sequence, with the heads "
    f"chosen on the other four tasks: {per_model('function_vector_next_item', '+.0%')}; over a random "
    f"vector: {per_model('function_vector_next_item_not_any_vector', '+.0%')}.\n"
    "- **Context retrieval**, how much deeper (as a share of the depth) the fetching heads sit than the "
    f"boundary where the request leaves its position: {per_model('retrieval_after_request', '+.2f')}."
))  # fmt: skip

# %% [markdown]
# **What a sceptic should weigh before reading the verdicts**, computed from the tables above:
# where a verdict comes from the metric rather than the model, where a positive control is
# only just met, and where the models here differ from the papers'.

# %% tags=["prose"]
notes = []
for row in ablation_rows:
    top_rise, random_rise = row["rise, joiner heads ablated"], row["rise, 3 random heads"]
    note = (
        f"{row['model']}: mean-ablating the three joiner heads changes the loss on word-continuing "
        f"tokens by {top_rise:+.3f} nats, three random heads by {random_rise:+.3f}."
    )
    if abs(random_rise) < 0.25 * abs(top_rise):
        note += (
            " The criterion's ratio divides by a number near zero, so its interval is wide whatever "
            "the effect: this verdict reports the metric's instability, not the heads. The difference "
            "of the two rises is what the criterion should have fixed; read here, it is exploratory."
        )
    notes.append(note)
for row in retrieval_rows:
    note = (
        f"{row['model']}: context retrieval's positive control, the answer preferred on "
        f"{row['answer preferred']:.0%} of the prompts (the criterion asks for half), mean logit "
        f"difference {row['logit difference']:+.2f}."
    )
    if row["answer preferred"] < 0.75:
        note += " The decomposition describes a behaviour this model only just has."
    notes.append(note)
for row in frequency_rows:
    notes.append(
        f"{row['model']}: the frequency correlation is {row['last block ρ [95% CI]']} for the last "
        f"block and {row['middle block ρ [95% CI]']} for the middle one. Kobayashi et al. traced "
        "GPT-2's frequency shift to the bias of its last layer norm, a parameter neither model here has."
    )
for name, per_task in fv_results.items():
    keys = ("10-shot", "zero-shot", "+ function vector", "‖FV‖ / ‖residual there‖")
    mean = {key: np.mean([r[key] for r in per_task]) for key in keys}
    notes.append(
        f"{LABEL[name]}: over the counted tasks, 10-shot accuracy {mean['10-shot']:.0%}, zero-shot "
        f"{mean['zero-shot']:.0%}, zero-shot with the function vector {mean['+ function vector']:.0%}; "
        f"the vector is {mean['‖FV‖ / ‖residual there‖']:.1f} times the norm of the residual it "
        "joins. Todd et al. worked with models of billions of parameters."
    )
for row in next_item_rows:
    note = (
        f"{row['model']}: the next-item task's positive control, 10-shot accuracy "
        f"{row['10-shot accuracy (selection)']:.0%} on {row['selection']} selection items (the criterion "
        "asks for 50% and 11 items)."
    )
    if "+ function vector" in row:
        note += (
            f" Zero-shot, {row['zero-shot']:.0%} of the held-out items without a vector, "
            f"{row['+ function vector']:.0%} with it; a sequence successor is also what a successor head "
            "writes (above), so a gain here may be the vector steering towards a mechanism the model "
            "already has."
        )
    notes.append(note)
for name, counted in input_tasks.items():
    if len(counted) < len(function_vectors.FV_TASKS):
        left = sorted(set(function_vectors.FV_TASKS) - set(counted))
        notes.append(
            f"{LABEL[name]}: the task-neuron mean is over {len(counted)} tasks ({', '.join(counted)}); "
            f"{', '.join(left)} has fewer than {TASK_MIN_PAIRS} usable pairs in a half (the amendment "
            "committed before this section's code), and telling apart fewer tasks is an easier question."
        )
for name in models:
    first_block = [r["for"] for r in input_rows if r["model"] == LABEL[name] and r["kind"] == "concept"
                   and r["neuron"].startswith("layer 0,")]  # fmt: skip
    if first_block:
        notes.append(
            f"{LABEL[name]}: the concept neurons for {', '.join(first_block)} sit in the first block, where "
            "a neuron at the member's own position reads little but that token and the few before it: "
            "what separates the class there is mostly in the members' embeddings."
        )
for row in input_rows:
    if row["AUROC on B"] <= row["95th pct"]:
        notes.append(
            f"{row['model']}: the {row['kind']} neuron chosen for {row['for']} scores "
            f"{row['AUROC on B']:.2f} on B, no higher than the 95th percentile of random neurons of its "
            f"layer ({row['95th pct']:.2f}): many neurons there tell it as well, so the verdict says "
            "the layer carries it, not that one neuron is special."
        )
for row in successor_rows:
    notes.append(
        f"{row['model']}: the successor head chosen on numbers and letters maps days and months at "
        f"{row['score on days and months [95% CI]']} against a chance of {row['chance']:.2f}; the best "
        f"head on days and months alone scores {row['best head on days and months']:.2f}, but choosing "
        "it there and scoring it there would be selection, not measurement."
    )
display(Markdown("\n".join(f"- {note}" for note in notes)))

# %% tags=["record"]
results = ledger.results(
    quick=quick,
    models=list(models),
    positional=positional_rows,
    joiner=joiner_rows,
    joiner_ablation=ablation_rows,
    syntactic=syntactic_rows,
    ngram_detectors=ngram_rows,
    direct_path=direct_rows,
    successor=successor_rows,
    copying=copy_rows,
    memory_heads=memory_rows,
    memory_neurons=neuron_rows,
    position_neurons=position_rows,
    anisotropy=anisotropy_rows,
    anisotropy_by_boundary={name: anisotropy_curves[name].to_dict(orient="records") for name in models},
    frequency_bias=frequency_rows,
    class_neurons=class_rows,
    input_neurons=input_rows,
    input_neuron_tasks=input_tasks,
    retrieval=retrieval_rows,
    retrieval_heads=retrieval_heads,
    function_vector_tasks=fv_rows,
    function_vector_next_item=next_item_rows,
    next_token_head=next_token_row,
    notes=notes,
    function_vectors=fv_results,
    function_vector_heads={
        name: [f"L{layer}H{head}" for layer, head in chosen] for name, chosen in fv_heads.items()
    },
)
stems = sorted({key.rsplit("_", 1)[0] for key in verdicts})  # a behaviour, whatever the model


def reproduced_on(stem: str) -> int:
    return sum(verdicts.get(f"{stem}_{SUFFIX[name]}") == "reproduced" for name in models)


everywhere = sum(reproduced_on(stem) == len(models) for stem in stems)
nowhere = sum(reproduced_on(stem) == 0 for stem in stems)
where = "both models" if len(models) == 2 else LABEL[models[0]]
headline = (f"Of the {len(stems)} behaviours tested, {everywhere} are reproduced on {where}; "
            f"{nowhere} {'on neither' if len(models) == 2 else 'are not'}.")  # fmt: skip
book.save_results(results, rerun={"n_windows": n_windows, "seed": seed}, headline=headline)
