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
# # Heads and the residual stream: what components do
#
# :::{admonition} What this chapter found, and how to rerun it
# :class: tip
# **Result:** {glue:md}`chapter_result`
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with
# SmolLM2 converted, the trained models read from their run records in `book/runs` (nothing
# trains); {glue:text}`rerun_cold` to train them all again from scratch (add `RETRAIN=1` to the
# command), which trains the two-layer induction models and the byte-level models.
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **This chapter reproduces** the component behaviours surveyed by {cite:t}`ferrando2024primer`:
# previous-token, duplicate-token and induction heads {cite:p}`olsson2022induction`, OV and QK
# circuits {cite:p}`elhage2021framework`, copy suppression {cite:p}`mcdougall2023copy`, the
# direct path as bigram statistics, and the outsized effect of outlier dimensions
# {cite:p}`kovaleva2021busters,puccetti2022frequency`, on SmolLM2 and on small models trained
# here. Each claim is judged against a criterion in `notebooks/criteria/heads.toml`, with a
# t-interval over the trained models' seeds or a bootstrap over SmolLM2's sequences and windows.
# Those criteria were written after earlier executions had shown the numbers (exploratory); a
# confirmatory round on fresh seeds, new sequences and windows, and Gemma-3-270M decides them.
#
# **The claims.** The Primer's survey of findings (section 5) lists what individual heads and
# the residual stream are known to do: *previous-token* and *duplicate-token* heads, and
# *induction heads*, which compose with a previous-token head to continue a pattern seen
# earlier in the context (and appear suddenly during training, {cite:t}`olsson2022induction`); heads
# whose OV circuit *copies* what they attend to, and *copy-suppression* heads that lower the
# logit of a token they attend to if the model is predicting it; a *direct path* (embedding
# straight to unembedding) that behaves like bigram statistics; and *outlier dimensions* of
# the residual stream whose ablation hurts the model far more than their number suggests.
#
# **The experiment.** First a two-layer attention-only model trained here on repeated random
# tokens, where the induction mechanism forms in front of us; then every claim checked on
# SmolLM2, with its corpus-level counterpart (bigram counts, random-dimension ablations)
# measured in the same run.

# %% tags=["parameters"]
model_name = "smollm2-135m"  # [model]
seeds = (1, 2, 3, 4, 5)  # [non-empty, min 0] seeds of the two-layer model and of the byte-level models
n_sequences = 32  # [> 0] repeated random sequences for the head scores
period = 20  # [> 1] tokens before the sequence repeats
n_vocab_sample = 1000  # [> 0] frequent tokens for the OV-circuit copy scores and the bigram comparison
n_windows = 16  # [> 0] pydoc windows of 128 tokens for the copy-suppression and outlier measurements
n_random_draws = 5  # [> 0] random dimension sets for the outlier ablation control
second_model = "gemma3-270m"  # [model] the confirmatory round's second pretrained model
fresh_seeds = (401, 402, 403, 404, 405, 406, 407, 408, 409, 410)  # [non-empty, min 0] fresh two-layer models
fresh_byte_seeds = (201, 202, 203, 204, 205)  # [non-empty, min 0] byte-level models of the confirmatory round
seed = 0  # [min 0]
quick = False  # a small run for CI

# %% tags=["setup"]
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown, display

import resid
from resid import book, data, dimensions, exercises, experiments, heads, progress, stats
from resid.cache import Head
from resid.train import PRESETS, measure, train

ledger = book.start_chapter("heads", seed)  # criteria, claims and checks; theme and seed
if quick:
    n_sequences, n_vocab_sample, n_windows, n_random_draws, seeds = 4, 100, 3, 2, (1, 2)
    fresh_seeds, fresh_byte_seeds = (401, 402), (201, 202)

# %% [markdown]
# ## Induction heads forming, in a model trained here
#
# Two attention-only layers, four heads each, trained on random tokens that repeat with a
# period drawn per sequence (so that only content, not a fixed offset, predicts the repeat).
# Every 50 steps: the loss on the first pass (unpredictable: $\ln 256 = 5.55$), the loss on
# the repeat, and the strongest head's induction score. These models are small enough that
# their run records in `book/runs` keep their weights: the sections below score, probe and
# ablate them on new sequences, which a history alone cannot answer. The byte-level models
# further down are too large to commit; their records keep only the measurement this chapter
# takes of them.

# %%
small_tokens = heads.repeated_tokens(n_sequences, period, 256, seed=seed)


def two_layer_run(s: int) -> tuple:
    """Train (or read) the two-layer model on seed ``s``: the run, its logged curve, and its
    summary row (how abruptly the repeat's loss falls, its best layer-1 induction and layer-0
    previous-token scores on ``small_tokens``)."""
    run = train(replace(PRESETS["induction-2l"], seed=s), progress=False, stop_after=100 if quick else None)
    curve = pd.DataFrame([{"seed": s, "step": h["step"], "first pass": h["loss_first_half"],
                           "repeat": h["loss_second_half"], "induction score": h["induction_score"]}
                          for h in run.history if "induction_score" in h])  # fmt: skip
    # abruptness: the share of training over which the repeat's loss makes the middle 80% of its fall
    fall = curve["repeat"].iloc[0] - curve["repeat"].iloc[-1]
    below = [
        curve.loc[curve["repeat"] <= curve["repeat"].iloc[0] - q * fall, "step"].min() for q in (0.1, 0.9)
    ]
    seed_scores = heads.head_scores(run.model, small_tokens, period)
    row = {
        "seed": s, "fall": fall,
        "steps for 10%→90% of the fall": below[1] - below[0] if fall > 0 else np.nan,
        "share of training": (below[1] - below[0]) / run.config.steps if fall > 0 else np.nan,
        "best layer-1 induction": seed_scores[seed_scores.layer == 1]["induction"].max(),
        "best layer-0 previous-token": seed_scores[seed_scores.layer == 0]["previous"].max(),
    }  # fmt: skip
    return run, curve, row


curves, small_runs, small_by_seed = [], {}, []
for s in seeds:
    small_runs[s], curve, row = two_layer_run(s)
    curves.append(curve)
    small_by_seed.append(row)
curves = pd.concat(curves, ignore_index=True)
small_by_seed = pd.DataFrame(small_by_seed).set_index("seed")
small = small_runs[seeds[0]]

# %% tags=["plot"] alt="Line plot of the loss over training steps for each seed of the two-layer model, on the first pass of a random sequence and on its repeat, where the induction bump appears as a sudden fall of the repeat's loss."
fig, ax = plt.subplots(figsize=(8, 3.5))
for s, curve in curves.groupby("seed"):
    first_seed = s == seeds[0]
    ax.plot(
        curve.step,
        curve["first pass"],
        color="C0",
        alpha=0.6,
        label="loss, first pass" if first_seed else None,
    )
    ax.plot(curve.step, curve["repeat"], color="C1", alpha=0.8, label="loss, repeat" if first_seed else None)
ax.set(xlabel="training step", ylabel="nats per token",
       title=f"the induction bump, {len(seeds)} seeds (one line each)")  # fmt: skip
ax.legend()
plt.show()

# %%
small_scores = heads.head_scores(small.model, small_tokens, period)
display(small_by_seed.style.format(precision=2))
display(
    small_scores.style.format(precision=2).background_gradient(
        cmap="Greens", vmin=0, vmax=1, subset=["previous", "duplicate", "induction"]
    )
)

# %% [markdown]
# ### Exercise 8.1: an induction score of your own
#
# *Coding · difficulty 2 of 3 · about 15 minutes*
#
# On `small_tokens` (random tokens, the last `period` of them repeating the `period` before),
# an induction head at query position $q$ in the repeat attends to $q - \text{period} + 1$: the
# token *after* the previous occurrence of the current one. Read the attention pattern of the
# small model's best induction head from `blocks.{L}.attn.hook_pattern` (`[batch, head, query,
# key]`) and compute its score: the mean of that attention weight over the repeat's queries and
# the batch. Check it against `small_scores`.

# %% tags=["starter"]


def induction_score(pattern: torch.Tensor, period: int) -> float:
    """pattern: [batch, query, key]. The mean attention from each query q of the repeat (the
    last `period` positions) to key q - period + 1."""
    raise NotImplementedError  # your code here


exercises.check("8.1", induction_score)


# %% tags=["hide-cell", "solution"]
def induction_score(pattern: torch.Tensor, period: int) -> float:
    queries = torch.arange(pattern.shape[-1] - period, pattern.shape[-1])  # the repeat
    return pattern[:, queries, queries - period + 1].mean().item()


best = small_scores.loc[small_scores["induction"].idxmax()]
layer, head = int(best.layer), int(best["head"])
_, pattern_cache = small.model.run_with_cache(small_tokens, [f"blocks.{layer}.attn.hook_pattern"])
pattern = pattern_cache[f"blocks.{layer}.attn.hook_pattern"][:, head]  # [batch, query, key]
my_score = induction_score(pattern, period)
ledger.check("an induction score by hand equals heads.head_scores",
             abs(my_score - best["induction"]) < 1e-5)  # fmt: skip
print(f"{Head(layer, head)}: {my_score:.3f} by hand, {best['induction']:.3f} from heads.head_scores")
assert exercises.check("8.1", induction_score)

# %% [markdown]
# The mechanism is the one {cite:t}`olsson2022induction` describe: previous-token heads in layer 0, induction
# heads in layer 1 (they need the previous token's identity written at each position before
# they can look for "the token after the last occurrence of mine").

# %% [markdown]
# ## Induction in SmolLM2
#
# SmolLM2 on sequences of random frequent tokens repeated once (after a BOS token): the loss
# on the repeat against the first pass, and every head's three scores.

# %%
model = resid.load(model_name)
tokenizer = model.tokenizer
text_ids = data.token_ids(data.corpus("pydoc")[: 2_000_000 if not quick else 200_000], tokenizer)
counts = torch.bincount(text_ids, minlength=model.cfg.vocab_size)
frequent = counts.argsort(descending=True)[:n_vocab_sample]
bos = torch.tensor([[tokenizer.hf.bos_token_id]]) if tokenizer.hf.bos_token_id is not None else None
repeated = heads.repeated_tokens(n_sequences, period, frequent, seed=seed, prefix=bos)
first_pass, repeat_pass = heads.in_context_losses(model, repeated, start=repeated.shape[1] - period)
scores = heads.head_scores(model, repeated, period)
# the same scores sequence by sequence (from one batched pass), for an interval over sequences
by_sequence = heads.sequence_head_scores(model, repeated, period)
induction_per_prompt = by_sequence["induction"].flatten(1)  # [sequence, head]
ledger.check(
    "the per-sequence induction scores average to the batch's, and the first and last sequence's "
    "equal those of a pass on that sequence alone",
    np.allclose(induction_per_prompt.mean(0).numpy(), scores["induction"].to_numpy(), atol=1e-5)
    and all(np.allclose(induction_per_prompt[i].numpy(), heads.head_scores(model, repeated[[i]], period)
                        ["induction"].to_numpy(), atol=1e-5) for i in (0, -1)),
)  # fmt: skip

# %% tags=["plot"] alt="Three heatmaps over SmolLM2's layers and heads: previous-token, duplicate-token and induction scores."
fig, axes = plt.subplots(1, 3, figsize=(10, 5.5), sharey=True)
for ax, kind in zip(axes, ["previous", "duplicate", "induction"], strict=True):
    sns.heatmap(
        scores.pivot(index="layer", columns="head", values=kind),
        ax=ax,
        cmap="Greens",
        vmin=0,
        vmax=1,
        cbar=kind == "induction",
    )
    ax.set_title(f"{kind}-token score" if kind != "induction" else "induction score")
plt.tight_layout()
plt.show()

# %%
top_induction = scores.sort_values("induction", ascending=False).head(5)
print(f"loss on the first pass {first_pass:.2f}, on the repeat {repeat_pass:.2f} nats per token")
display(top_induction.style.format(precision=2).hide(axis="index"))

# %% [markdown]
# Are those heads what does the copying? Mean-ablate the five best induction heads (replace
# their output by its average) and compare with ablating five random heads, several draws. The
# heads were chosen on the sequences above; the ablations run on held-out repeated sequences,
# so that the choice cannot flatter the test.


# %%
def ablated_repeat_losses(tokens: torch.Tensor, chosen: list[tuple[int, int]], means: dict) -> torch.Tensor:
    return heads.ablated_in_context_losses(model, tokens, chosen, start=tokens.shape[1] - period, means=means)


held_out = heads.repeated_tokens(n_sequences, period, frequent, seed=seed + 1, prefix=bos)
held_first, held_repeat = heads.in_context_losses(
    model, held_out, start=held_out.shape[1] - period, per_prompt=True
)
top5 = [tuple(map(int, r)) for r in top_induction[["layer", "head"]].values]
generator = torch.Generator().manual_seed(seed)
all_heads = [(layer, head) for layer in range(model.cfg.n_layers) for head in range(model.cfg.n_heads)]
random_sets = [[all_heads[i] for i in torch.randperm(len(all_heads), generator=generator)[:5]]
               for _ in range(n_random_draws)]  # fmt: skip
held_means = heads.output_means(model, held_out)  # every head's mean output, shared by the ablated sets
random_ablated = torch.stack(
    [ablated_repeat_losses(held_out, chosen, held_means) for chosen in random_sets]
).mean(0)
induction_ablated = ablated_repeat_losses(held_out, top5, held_means)


def undone(first: torch.Tensor, repeat: torch.Tensor, ablated: torch.Tensor) -> float:
    """The share of the repeat's in-context gain (first pass minus repeat) an ablation undoes."""
    return ((ablated.mean() - repeat.mean()) / (first.mean() - repeat.mean())).item()


undone_top, undone_random = (
    undone(held_first, held_repeat, induction_ablated),
    undone(held_first, held_repeat, random_ablated),
)
print(
    f"held-out repeat loss: intact {held_repeat.mean():.3f} (first pass {held_first.mean():.3f}); top-5 "
    f"induction heads ablated {induction_ablated.mean():.3f}; 5 random heads ablated "
    f"{random_ablated.mean():.3f} (mean of {n_random_draws} draws). Share of the in-context gain undone: "
    f"{undone_top:.0%} against {undone_random:.0%}."
)

# %% [markdown]
# ### Exercise 8.2: how low can the first pass go?
#
# *Prediction · difficulty 1 of 3 · about 10 minutes*
#
# The first pass of a repeated sequence is tokens drawn uniformly at random. **Predict**, from
# first principles, the lowest loss any model can have there on average: for the small model
# (tokens drawn from all 256 bytes) and for SmolLM2 (drawn from `n_vocab_sample` frequent
# tokens). Which of the two models should come close to its bound, and why? Check both with
# `heads.in_context_losses`.

# %% tags=["starter"]
exercises.predict("8.2", ...)  # the lowest mean first-pass loss for uniformly random bytes, in nats


bound = ...  # the same bound, worked out from first principles
exercises.check("8.2", bound)

# %% tags=["hide-cell", "solution"]
small_first, small_repeat = heads.in_context_losses(
    small.model, small_tokens, start=small_tokens.shape[1] - period
)
bounds = {"small model": np.log(256), model_name: np.log(n_vocab_sample)}
# the cross-entropy with uniform tokens is at least their entropy, ln(number of choices); the
# averages here are over a few hundred tokens, so allow a little sampling noise
ledger.check(
    "no model beats the first pass's entropy bound ln K (to sampling noise)",
    small_first > bounds["small model"] - 0.1 and first_pass > bounds[model_name] - 0.1,
    f"small model {small_first:.2f} vs {bounds['small model']:.2f}; {model_name} {first_pass:.2f} vs "
    f"{bounds[model_name]:.2f}",
)  # fmt: skip
losses_vs_bound = pd.DataFrame({
    "bound ln K": bounds,
    "first pass": {"small model": small_first, model_name: first_pass},
    "repeat": {"small model": small_repeat, model_name: repeat_pass},
})  # fmt: skip
exercises.predict("8.2", float(bounds["small model"]))
assert exercises.check("8.2", float(np.log(256)))
losses_vs_bound.style.format("{:.2f}")

# %% [markdown]
# ## OV and QK circuits
#
# The full OV circuit $W_E W_{OV} W_U$ says what a head writes about the token it attends to;
# the QK circuit $W_E W_{QK} W_E^\top$ which tokens it attends to (ignoring position). On 30
# frequent words: the strongest duplicate-token head should match a token to itself (a
# bright QK diagonal), an induction head should copy (a bright OV diagonal).

# %%
duplicate_head = tuple(
    map(int, scores.sort_values("duplicate", ascending=False)[["layer", "head"]].values[0])
)
induction_head = top5[0]
words = [
    t for t in frequent.tolist() if tokenizer.decode([t]).strip().isalpha() and len(tokenizer.decode([t])) > 3
][:30]
word_ids = torch.tensor(words)
word_labels = [tokenizer.decode([t]) for t in words]
panels = [
    (
        heads.qk_circuit(model, *duplicate_head, word_ids),
        f"QK of duplicate head L{duplicate_head[0]}H{duplicate_head[1]}",
    ),
    (
        heads.ov_circuit(model, *duplicate_head, word_ids),
        f"OV of duplicate head L{duplicate_head[0]}H{duplicate_head[1]}",
    ),
    (
        heads.ov_circuit(model, *induction_head, word_ids),
        f"OV of induction head L{induction_head[0]}H{induction_head[1]}",
    ),
]

# %% tags=["plot"] alt="Three heatmaps of circuits over frequent tokens (row-centred): an induction head's QK circuit (query token by key token) and two heads' OV circuits (attended token by logit of token)."
fig, axes = plt.subplots(1, 3, figsize=(10, 4.6))
for ax, (matrix, title) in zip(axes, panels, strict=True):
    centred = matrix - matrix.mean(1, keepdim=True)
    limit = centred.abs().max().item()
    sns.heatmap(
        centred.numpy(),
        ax=ax,
        cmap="RdBu_r",
        center=0,
        vmin=-limit,
        vmax=limit,
        xticklabels=word_labels,
        yticklabels=word_labels,
        cbar=False,
    )
    ax.set_title(title + " (row-centred)")
    ax.set(
        xlabel="key token" if "QK" in title else "logit of token",
        ylabel="query token" if "QK" in title else "attended token",
    )
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Copying and copy suppression
#
# For every head, over the frequent tokens: how often is the attended token's own logit the
# largest of its OV row (copying), and how often the smallest (suppression)?

# %%
copy = heads.copy_scores(model, frequent)

# %% tags=["plot"] alt="Scatter plot of every head's OV-circuit copying score against its suppression score, with the three strongest of each labelled."
fig, ax = plt.subplots(figsize=(7, 5))
ax.scatter(copy["copying"], copy["suppression"], s=10, alpha=0.6)
for _, row in pd.concat([copy.nlargest(3, "copying"), copy.nlargest(3, "suppression")]).iterrows():
    ax.annotate(str(Head(int(row.layer), int(row["head"]))), (row["copying"], row["suppression"]), fontsize=8)
ax.set(
    xlabel="copying: own logit is the row's maximum",
    ylabel="suppression: own logit is the row's minimum",
    title=f"OV circuits of all {len(copy)} heads over {len(frequent)} tokens",
)
plt.show()

# %%
suppressor = copy.loc[copy["suppression"].idxmax()]
copier = copy.loc[copy["copying"].idxmax()]
print(
    f"strongest suppressor L{suppressor.layer:.0f}H{suppressor['head']:.0f} "
    f"({suppressor['suppression']:.0%} of "
    f"tokens); strongest copier L{copier.layer:.0f}H{copier['head']:.0f} ({copier['copying']:.0%})"
)

# %% [markdown]
# ### Exercise 8.3: read a copying score off the OV circuit
#
# *Coding · difficulty 1 of 3 · about 10 minutes*
#
# With `heads.ov_circuit(model, layer, head, frequent)` (rows: the attended token; columns: the
# logit it raises), compute the strongest copier's copying score yourself: the fraction of rows
# whose largest entry is on the diagonal. **Predict** before running: is the strongest copier
# also one of SmolLM2's top induction heads?


# %% tags=["starter"]
def copying_score(ov: torch.Tensor) -> float:
    """The fraction of rows of an OV circuit (rows: attended token) whose largest entry is on the diagonal."""
    raise NotImplementedError  # your code here


exercises.check("8.3", copying_score)

# %% tags=["hide-cell", "solution"]
layer, head = int(copier.layer), int(copier["head"])
ov = heads.ov_circuit(model, layer, head, frequent)


def copying_score(ov: torch.Tensor) -> float:
    return (ov.argmax(1) == torch.arange(len(ov))).float().mean().item()  # diagonal is the row's top


my_copying = copying_score(ov)
ledger.check("a copying score by hand equals heads.copy_scores",
             abs(my_copying - copier["copying"]) < 1e-6)  # fmt: skip
is_induction = (layer, head) in top5
print(f"{Head(layer, head)}: copying {my_copying:.0%} by hand; "
      + ("it is one of the top-5 induction heads" if is_induction else
         "it is not among the top-5 induction heads: copying what you attend to is half of induction; "
         "the other half is attending to the right token"))  # fmt: skip
assert exercises.check("8.3", copying_score)

# %% [markdown]
# On real text, what does each of the two do to the token it attends to most? Its direct
# effect on that token's logit, and the change of that logit when the head is mean-ablated
# (a copy-suppression head should lower the token directly, so ablating it raises it):

# %%
windows = data.windows(text_ids, 128, n_windows, seed=seed)
if bos is not None:
    windows = torch.cat([bos.expand(len(windows), 1), windows[:, :-1]], dim=1)
roles = {"suppressor": suppressor, "copier": copier}
by_window = {  # each effect per window, for the intervals over windows; pooled over positions below
    role: heads.attended_token_effect(model, windows, int(h.layer), int(h["head"]), per_prompt=True)
    for role, h in roles.items()
}
effects = pd.DataFrame([
    {"head": str(Head(int(h.layer), int(h["head"]))), "role": role, **heads.pooled_effects(by_window[role])}
    for role, h in roles.items()
])  # fmt: skip
display(effects.style.format(precision=3).hide(axis="index"))
suppressor_by_window = by_window["suppressor"]

# %% [markdown]
# ## The direct path and bigram statistics
#
# Skip every block: embed a token, apply the final norm and unembed. The Primer (after
# {cite:t}`elhage2021framework`) reads this path as the model's bigram table. We compare it with bigram counts
# over the Python documentation, against the obvious baseline of always predicting the most
# frequent tokens (a unigram model), for SmolLM2 and for a byte-level model trained here.
# Both tie their embedding and unembedding matrices, so the last column, how often the
# direct path predicts the input token itself, is worth watching.


# %%
def direct_path_vs_bigrams(model_, ids: torch.Tensor, rows: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """The summary row, and per token compared whether the direct path's top-1 is the bigram
    top-1 minus whether the unigram baseline's is (-1, 0 or 1)."""
    bigram = heads.bigram_log_probs(ids, model_.cfg.vocab_size, rows)
    direct = heads.direct_path_logits(model_, rows).log_softmax(-1)
    unigram = torch.bincount(ids, minlength=model_.cfg.vocab_size).float().add(1).log()
    top_bigram = bigram.argmax(-1)
    spearman = np.mean(
        [
            pd.Series(direct[i].numpy()).corr(pd.Series(bigram[i].numpy()), method="spearman")
            for i in range(min(len(rows), 200))
        ]
    )
    direct_hits = (direct.argmax(-1) == top_bigram).float()
    unigram_hits = (unigram.argmax() == top_bigram).float()
    summary = {
        "tokens compared": len(rows),
        "direct path top-1 = bigram top-1": direct_hits.mean().item(),
        "unigram top-1 = bigram top-1": unigram_hits.mean().item(),
        "Spearman(direct path, bigram) per row": spearman,
        "direct path top-1 = the input token": (direct.argmax(-1) == rows).float().mean().item(),
    }
    return summary, direct_hits - unigram_hits


byte_ids = data.token_ids(data.corpus("pydoc")[: 2_000_000 if not quick else 200_000], data.ByteTokenizer())
byte_rows = torch.bincount(byte_ids, minlength=256).argsort(descending=True)[:64]
smol_summary, smol_advantage = direct_path_vs_bigrams(model, text_ids, frequent)
bigram_rows, byte_advantage = [{"model": model_name, **smol_summary}], {}
for s in seeds:
    byte_cfg = experiments.variant("layernorm", s)
    byte_cfg = experiments.quick_config(byte_cfg) if quick else byte_cfg
    # the trained model's direct path against the bigrams, as its run record keeps it
    summary, byte_advantage[s] = measure(byte_cfg, direct_path_vs_bigrams, ids=byte_ids, rows=byte_rows)
    bigram_rows.append({"model": f"byte-level (Kurtosis regime, seed {s})", **summary})
bigram_table = pd.DataFrame(bigram_rows)
display(bigram_table.style.format(precision=3).hide(axis="index"))

# %% [markdown]
# Every byte-level seed gives the same rate difference, and the claims below give it an
# interval of zero width. That is no coincidence of five seeds: each model's direct path ranks
# the input byte itself first for all or nearly all rows (the last column), so it agrees with
# the bigram top-1 only where the most likely next byte is the byte itself, and the unigram
# baseline's agreement is a count over the text. Both rates are then set by the text, not by
# the seed. The claim fails for a reason the seeds cannot change: with tied embeddings the
# direct path copies its input.

# %% [markdown]
# ## Outlier dimensions carry more than their share
#
# The outliers chapter found a few residual dimensions of SmolLM2 far above the others. Here
# a dimension counts as an outlier if some token exceeds 6 × its own RMS there in at least a
# quarter of the layer boundaries (Dettmers' "≥ 25% of layers"). Ablating them (set to zero,
# or to their mean at each position, at the input of every block and of the unembedding) is
# compared with ablating as many random dimensions *of matched magnitude*: for each outlier
# dimension a random one among the five non-outlier dimensions closest to it in mean $|x|$ (no
# other dimension reaches an outlier's size, so the match is as close as the model allows, and
# the table shows how close), and, as before, as many dimensions drawn uniformly. The three steps
# (finding the outliers, the matched draw, the ablated losses) are `resid.dimensions`.


# %%
stream = model.residual_stream(windows)  # [boundary, window * position, d_model]
outliers, magnitude = dimensions.outlier_dimensions(model, windows, stream=stream)
n_windows_read, n_positions = windows.shape
position_means = stream.reshape(len(stream), n_windows_read, n_positions, -1).mean(1)  # [boundary, pos, d]
del stream

intact = heads.next_token_losses(model, windows).mean(1)  # [window]
generator = torch.Generator().manual_seed(seed)
non_outliers = [d for d in range(model.cfg.d_model) if d not in outliers]
draws = {
    "matched": [dimensions.matched_draw(generator, outliers, magnitude) for _ in range(n_random_draws)],
    "uniform": [[non_outliers[i] for i in torch.randperm(len(non_outliers), generator=generator)]
                [: len(outliers)] for _ in range(n_random_draws)],
}  # fmt: skip
increase = {}  # (ablated set, mode) -> loss increase per window, averaged over draws
for mode, means in (("zero", None), ("mean", position_means)):
    increase["outlier", mode] = dimensions.ablated_losses(model, windows, outliers, means) - intact
    for kind, sets in draws.items():
        increase[kind, mode] = torch.stack([dimensions.ablated_losses(model, windows, dims, means) - intact
                                            for dims in sets]).mean(0)  # fmt: skip
labels = {"outlier": f"{len(outliers)} outlier dims", "matched": f"{len(outliers)} random dims, matched |x|",
          "uniform": f"{len(outliers)} random dims, uniform"}  # fmt: skip
summary = pd.DataFrame([
    {"ablated": labels[kind], "mode": mode, "mean |x| of the set": magnitude[
        outliers if kind == "outlier" else [d for dims in draws[kind] for d in dims]].mean().item(),
     "Δ loss": values.mean().item()}
    for (kind, mode), values in increase.items()
])  # fmt: skip
print(f"outlier dims: {outliers}; loss intact {intact.mean():.3f} nats per token")
display(summary.style.format(precision=3).hide(axis="index"))

# %% [markdown]
# ### Exercise 8.4: a previous-token score of your own
#
# *Coding · difficulty 1 of 3 · about 10 minutes*
#
# A previous-token head at query $q$ attends to $q - 1$. Write its score on a pattern
# `[batch, query, key]`: the mean of that weight over every query that has a previous token and
# over the batch. Check it on the small model's best previous-token head against `small_scores`.


# %% tags=["starter"]
def previous_token_score(pattern: torch.Tensor) -> float:
    """pattern: [batch, query, key]. The mean attention from each query q >= 1 to key q - 1."""
    raise NotImplementedError  # your code here


exercises.check("8.4", previous_token_score)


# %% tags=["hide-cell", "solution"]
def previous_token_score(pattern: torch.Tensor) -> float:
    queries = torch.arange(1, pattern.shape[-1])
    return pattern[:, queries, queries - 1].mean().item()


best_previous = small_scores.loc[small_scores["previous"].idxmax()]
layer, head = int(best_previous.layer), int(best_previous["head"])
_, pattern_cache = small.model.run_with_cache(small_tokens, [f"blocks.{layer}.attn.hook_pattern"])
mine = previous_token_score(pattern_cache[f"blocks.{layer}.attn.hook_pattern"][:, head])
ledger.check("a previous-token score by hand equals heads.head_scores",
             abs(mine - best_previous["previous"]) < 1e-5)  # fmt: skip
print(f"{Head(layer, head)}: {mine:.3f} by hand, {best_previous['previous']:.3f} from heads.head_scores")
assert exercises.check("8.4", previous_token_score)

# %% [markdown]
# ## The confirmatory round: fresh seeds, new sequences and windows, a second model
#
# The claims above were judged by criteria written after this chapter had shown their
# numbers. The round that decides them reads data none of them read, against criteria
# committed before any of its measurements (`notebooks/criteria/heads.toml`, the sections
# after the first nine). The two-layer model trains on ten new seeds; because its first round
# was bimodal (one seed of five formed no induction head, and set both intervals alone), whether
# the mechanism forms is counted over seeds, and how it forms is read on the seeds where it did.
# SmolLM2's heads and outlier dimensions, chosen above, are measured on new sequences and
# windows; Gemma-3-270M's are chosen on one set and measured on another; the byte-level models
# are the Kurtosis chapter's fresh seeds.

# %%
fresh_rows = [two_layer_run(s)[2] for s in progress.track(fresh_seeds, "two-layer model (fresh seed)")]
fresh_two_layer = pd.DataFrame(fresh_rows).set_index("seed")
fresh_formed = fresh_two_layer[fresh_two_layer["best layer-1 induction"] > 0.5]
display(fresh_two_layer.style.format(precision=2))
print(f"an induction head (layer-1 score > 0.5) formed in {len(fresh_formed)} of {len(fresh_two_layer)}")

# %%
# SmolLM2 on new sequences and windows, with the heads and dimensions chosen above
new_repeated = heads.repeated_tokens(n_sequences, period, frequent, seed=seed + 2, prefix=bos)
best_head = top5[0]


def head_induction_by_sequence(lm, tokens: torch.Tensor, head: tuple[int, int]) -> torch.Tensor:
    """One head's induction score on each sequence: ``[sequence]``."""
    return heads.sequence_head_scores(lm, tokens, period)["induction"][:, head[0], head[1]]


new_best_scores = head_induction_by_sequence(model, new_repeated, best_head)
new_first, new_repeat = heads.in_context_losses(model, new_repeated, start=new_repeated.shape[1] - period,
                                                per_prompt=True)  # fmt: skip
new_means = heads.output_means(model, new_repeated)
new_random = torch.stack(
    [ablated_repeat_losses(new_repeated, chosen, new_means) for chosen in random_sets]
).mean(0)
new_ablations = (new_first, new_repeat, ablated_repeat_losses(new_repeated, top5, new_means), new_random)
new_windows = data.windows(text_ids, 128, n_windows, seed=seed, skip=n_windows)
if bos is not None:
    new_windows = torch.cat([bos.expand(len(new_windows), 1), new_windows[:, :-1]], dim=1)
suppressor_head = (int(suppressor.layer), int(suppressor["head"]))
new_suppressor = heads.attended_token_effect(model, new_windows, *suppressor_head, per_prompt=True)
new_outlier_increase = dimensions.outlier_increases(model, outliers, draws["matched"], new_windows)

# %%
# Gemma-3-270M: heads and outlier dimensions chosen on one set, measured on another
second = resid.load(second_model)
second_tokenizer, second_bos = second.tokenizer, data.leading_bos(second.tokenizer)
second_ids = data.token_ids(data.corpus("pydoc")[: 2_000_000 if not quick else 200_000], second_tokenizer)
second_frequent = torch.bincount(second_ids, minlength=second.cfg.vocab_size).argsort(descending=True)[
    :n_vocab_sample]  # fmt: skip
second_prefix = None if second_bos is None else torch.tensor([[second_bos]])
second_choose, second_measure = (heads.repeated_tokens(n_sequences, period, second_frequent, seed=seed + k,
                                                       prefix=second_prefix) for k in (0, 1))  # fmt: skip
second_scores = heads.head_scores(second, second_choose, period)
second_ranked = second_scores.sort_values("induction", ascending=False)
second_top5 = [tuple(map(int, r)) for r in second_ranked.head(5)[["layer", "head"]].values]
second_best_scores = head_induction_by_sequence(second, second_measure, second_top5[0])
second_heads = [(layer, head) for layer in range(second.cfg.n_layers) for head in range(second.cfg.n_heads)]
second_random_sets = [[second_heads[i] for i in torch.randperm(len(second_heads), generator=generator)[:5]]
                      for _ in range(n_random_draws)]  # fmt: skip
start = second_measure.shape[1] - period
second_first, second_repeat = heads.in_context_losses(second, second_measure, start=start, per_prompt=True)
second_means = heads.output_means(second, second_measure)
ablated_second = [heads.ablated_in_context_losses(second, second_measure, chosen, start, second_means)
                  for chosen in [second_top5, *second_random_sets]]  # fmt: skip
second_ablations = (second_first, second_repeat, ablated_second[0], torch.stack(ablated_second[1:]).mean(0))
second_choose_windows, second_measure_windows = (
    data.windows(second_ids, 128, n_windows, seed=seed, skip=k * n_windows, bos=second_bos) for k in (0, 1)
)
second_outliers, second_magnitude = dimensions.outlier_dimensions(second, second_choose_windows)
second_matched = [dimensions.matched_draw(generator, second_outliers, second_magnitude)
                  for _ in range(n_random_draws)]  # fmt: skip
second_outlier_increase = dimensions.outlier_increases(
    second, second_outliers, second_matched, second_measure_windows
)
print(f"{second_model}: best induction head {Head(*second_top5[0])} ({second_scores['induction'].max():.2f} "
      f"on the choosing sequences); outlier dimensions {second_outliers}")  # fmt: skip
del second

# %%
# the byte-level models on the Kurtosis chapter's fresh seeds
fresh_byte_rates, fresh_byte_identity = [], []
for s in fresh_byte_seeds:
    byte_cfg = experiments.variant("layernorm", s)
    byte_cfg = experiments.quick_config(byte_cfg) if quick else byte_cfg
    fresh_summary, advantage = measure(byte_cfg, direct_path_vs_bigrams, ids=byte_ids, rows=byte_rows)
    fresh_byte_rates.append(advantage.mean().item())
    fresh_byte_identity.append(fresh_summary["direct path top-1 = the input token"])

# %% [markdown]
# ## Checks
#
# The identities and sanity properties asserted along the way (a failing one stops the
# chapter). They are never counted as reproductions.

# %% tags=["checks"]
ledger.checks_table()

# %% [markdown]
# (claims-heads)=
# ## The Primer's claims, judged against their criteria
#
# Each row: the claim, its source, our estimate with its 95% interval (a t-interval over the
# trained models' seeds; for SmolLM2 a percentile bootstrap over the repeated sequences or the
# text windows), the criterion in `notebooks/criteria/heads.toml`, and the verdict.

# %%
n_resamples = 200 if quick else 2000


def seed_interval(values) -> stats.Interval:
    return stats.t_interval(np.asarray(values, dtype=float))


def formed_interval(values) -> stats.Interval:
    """A t-interval over the seeds where the mechanism formed; unmeasured (so inconclusive) where
    fewer than two did, since how it forms cannot be read where it did not."""
    return seed_interval(values) if len(values) >= 2 else stats.Interval(*(float("nan"),) * 3)


def best_induction(per_prompt: torch.Tensor) -> float:
    return per_prompt.mean(0).max().item()  # the best head, chosen again in every resample


def ablation_contrast(first, repeat, top, random_) -> float:
    return undone(first, repeat, top) - undone(first, repeat, random_)


def ratio_of_means(numerator: torch.Tensor, denominator: torch.Tensor) -> float:
    return (numerator.mean() / denominator.mean()).item()


weaker_head = small_by_seed[["best layer-1 induction", "best layer-0 previous-token"]].min(axis=1)
byte_rates = [advantage.mean().item() for advantage in byte_advantage.values()]
ablations = (held_first, held_repeat, induction_ablated, random_ablated)
outlier_increase = (increase["outlier", "zero"], increase["matched", "zero"])
measured = {  # criterion id -> ((estimate, low, high), what it is)
    "induction_forms_abruptly": (seed_interval(small_by_seed["share of training"]), "share"),
    "two_layer_mechanism": (seed_interval(weaker_head), "score"),
    "pretrained_induction_heads": (
        stats.bootstrap_statistic(best_induction, induction_per_prompt, n_resamples=n_resamples), "score"),
    "induction_ablation": (
        stats.bootstrap_statistic(ablation_contrast, *ablations, n_resamples=n_resamples), "Δ share undone"),
    "copy_suppression_direct": (stats.bootstrap(
        suppressor_by_window["direct effect on attended token"], n_resamples=n_resamples).item(), "logit"),
    "copy_suppression_ablation": (stats.bootstrap(
        suppressor_by_window["logit change when ablated"], n_resamples=n_resamples).item(), "logit"),
    "direct_path_bigrams": (
        stats.bootstrap(smol_advantage, n_resamples=n_resamples).item(), "rate difference"),
    "direct_path_bigrams_bytes": (seed_interval(byte_rates), "rate difference"),
    "outlier_ablation": (
        stats.bootstrap_statistic(ratio_of_means, *outlier_increase, n_resamples=n_resamples), "ratio"),
    "induction_forms_fresh": (
        stats.wilson_interval(len(fresh_formed), len(fresh_two_layer)),
        f"{len(fresh_formed)} of {len(fresh_two_layer)} seeds:"),
    "induction_forms_abruptly_fresh": (formed_interval(fresh_formed["share of training"]), "share"),
    "two_layer_mechanism_fresh": (formed_interval(fresh_formed["best layer-0 previous-token"]), "score"),
    "pretrained_induction_heads_heldout": (
        stats.bootstrap(new_best_scores, n_resamples=n_resamples).item(), f"{Head(*best_head)}: score"),
    "pretrained_induction_heads_gemma": (
        stats.bootstrap(second_best_scores, n_resamples=n_resamples).item(),
        f"{Head(*second_top5[0])}: score"),
    "induction_ablation_heldout": (
        stats.bootstrap_statistic(ablation_contrast, *new_ablations, n_resamples=n_resamples),
        "Δ share undone"),
    "induction_ablation_gemma": (
        stats.bootstrap_statistic(ablation_contrast, *second_ablations, n_resamples=n_resamples),
        "Δ share undone"),
    "copy_suppression_direct_heldout": (
        stats.bootstrap(new_suppressor["direct effect on attended token"], n_resamples=n_resamples).item(),
        "logit"),
    "copy_suppression_ablation_heldout": (
        stats.bootstrap(new_suppressor["logit change when ablated"], n_resamples=n_resamples).item(),
        "logit"),
    "direct_path_bigrams_bytes_fresh": (seed_interval(fresh_byte_rates), "rate difference"),
    "outlier_ablation_heldout": (
        stats.bootstrap_statistic(ratio_of_means, *new_outlier_increase, n_resamples=n_resamples), "ratio"),
    "outlier_ablation_gemma": (
        stats.bootstrap_statistic(ratio_of_means, *second_outlier_increase, n_resamples=n_resamples),
        "ratio"),
}  # fmt: skip
for key in ledger.criteria:
    interval, what = measured[key]
    ledger.judge(key, interval, what)
ledger.claims_table()

# %% [markdown]
# **Takeaways**, computed from the rows above.

# %% tags=["prose"]
verdicts, estimates, claim_rows = ledger.verdicts, ledger.estimates, ledger.claims
suppressor_name = str(Head(int(suppressor.layer), int(suppressor["head"])))
# why the byte-level rows can have an interval of zero width: where the direct path predicts the
# input byte itself, its agreement with the bigram top-1 is a property of the text, not of training
byte_identity = [row["direct path top-1 = the input token"] for row in bigram_rows[1:]] + fresh_byte_identity
byte_successor = heads.bigram_log_probs(byte_ids, 256, byte_rows).argmax(-1)  # each byte's likeliest next
self_successor = (byte_successor == byte_rows).float().mean().item()
tied = experiments.REGIME.model.tie_embeddings
display(Markdown(
    f"- **Induction.** In the two-layer model the repeat's loss makes 80% of its fall within "
    f"{estimates['induction_forms_abruptly']:.0%} of training on average over {len(seeds)} seeds "
    f"({verdicts['induction_forms_abruptly']} against 'abruptly'), and the weaker of its layer-1 induction "
    f"and layer-0 previous-token heads scores {estimates['two_layer_mechanism']:.2f} "
    f"({verdicts['two_layer_mechanism']}). SmolLM2's best induction score is "
    f"{estimates['pretrained_induction_heads']:.2f} ({verdicts['pretrained_induction_heads']}); ablating its "
    f"five best induction heads undoes {undone_top:.0%} of the in-context gain on held-out sequences, five "
    f"random heads {undone_random:.0%} ({verdicts['induction_ablation']}).\n"
    f"- **Copy suppression.** The head whose OV circuit most often ranks a token's own logit last, "
    f"{suppressor_name}, changes the attended token's logit on text by "
    f"{estimates['copy_suppression_direct']:+.2f} directly ({verdicts['copy_suppression_direct']} against "
    f"'lowers it'), and ablating it changes that logit by {estimates['copy_suppression_ablation']:+.2f} "
    f"({verdicts['copy_suppression_ablation']}). An OV-circuit score read off the embeddings is a "
    "candidate, not the behaviour, which is why McDougall et al. checked theirs causally.\n"
    f"- **The direct path** agrees with the bigram top-1 {estimates['direct_path_bigrams']:+.0%} more often "
    f"than the unigram baseline in SmolLM2 ({verdicts['direct_path_bigrams']}) and "
    f"{estimates['direct_path_bigrams_bytes']:+.0%} in the byte-level models "
    f"({verdicts['direct_path_bigrams_bytes']}); SmolLM2's direct path predicts the input token itself for "
    f"{smol_summary['direct path top-1 = the input token']:.0%} of the tokens compared (both models tie "
    "their embeddings). In the byte-level models it predicts the input byte itself for at least "
    f"{min(byte_identity):.0%} of the {len(byte_rows)} bytes in every seed"
    + (" (with tied embeddings the direct path is close to the identity)" if tied else "")
    + "; its agreement with the bigram top-1 is then the share of bytes most often followed by themselves, "
    f"{self_successor:.1%}, a property of the text rather than of training, which is why the byte-level "
    "rows' intervals can have zero width.\n"
    f"- **Outlier dimensions.** Zeroing {len(outliers)} of them raises the loss "
    f"{estimates['outlier_ablation']:.1f}× as much as zeroing as many non-outlier dimensions of the closest "
    f"magnitude ({verdicts['outlier_ablation']} against 'far more', 5×)."
))  # fmt: skip
fresh_ids = [key for key in ledger.criteria if key.endswith(("_heldout", "_gemma", "_fresh"))]
display(Markdown(
    "**The confirmatory round** decides these claims:\n\n"
    + "\n".join(f"- {row['claim']}: {row['ours']}, **{row['verdict']}**"
                 for row in claim_rows if row["id"] in fresh_ids)
    + f"\n\nA label says what its own measurement says: {suppressor_name} is the strongest *OV* suppressor ("
    "its circuit ranks the attended token last for most tokens), and on text it "
    + ("lowers" if estimates["copy_suppression_direct_heldout"] < 0 else "raises")
    + " the token it attends to; it is a copy-suppression head only where both agree."
))  # fmt: skip

# %% tags=["record"]
results = ledger.results(
    **{
        "quick": quick,
        "model": model_name,
        "two_layer_by_seed": small_by_seed.reset_index().to_dict(orient="records"),
        "small_model_scores": small_scores.to_dict(orient="records"),
        "smollm2_top_induction": top_induction.to_dict(orient="records"),
        "repeat_loss": {
            "first": first_pass,
            "repeat": repeat_pass,
            "held_out_undone_top5": undone_top,
            "held_out_undone_random5": undone_random,
        },
        "copy": {"suppressor": suppressor.to_dict(), "copier": copier.to_dict()},
        "bigram": bigram_table.to_dict(orient="records"),
        "outlier_dims": outliers,
        "outlier_ablation": summary.to_dict(orient="records"),
        "fresh_two_layer": fresh_two_layer.reset_index().to_dict(orient="records"),
        "second_model_outlier_dims": second_outliers,
    }
)
best_new = estimates["pretrained_induction_heads_heldout"]
best_gemma = estimates["pretrained_induction_heads_gemma"]
undone_new, undone_gemma = estimates["induction_ablation_heldout"], estimates["induction_ablation_gemma"]
suppression = estimates["copy_suppression_direct_heldout"]
headline = (
    f"Both pretrained models have induction heads (best score {best_new:.2f} on new SmolLM2 sequences, "
    f"{best_gemma:.2f} on Gemma-3-270M), and ablating the five best undoes {100 * undone_new:.0f} and "
    f"{100 * undone_gemma:.0f} percentage points more of the in-context gain than five random heads. "
    f"SmolLM2's strongest OV suppressor, {suppressor_name}, {'lowers' if suppression < 0 else 'raises'} the "
    f"token it attends to on new windows ({suppression:+.2f} logits)."
)
book.save_results(
    results, rerun={"model_name": model_name, "n_sequences": n_sequences, "seed": seed}, headline=headline
)
