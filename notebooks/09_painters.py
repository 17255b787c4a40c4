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
# # Transformer layers as painters
#
# :::{admonition} What this chapter reproduces, and how to rerun it
# :class: tip
# **Reproduces** the eight questions of {cite:t}`sun2024painters`: hidden-state similarity
# between layers; skipping, repeating the middle layer, reversing, shuffling, running in
# parallel and looped parallel; on a decoder (SmolLM2-135M) and an encoder (all-MiniLM-L6-v2
# {cite:p}`wang2020minilm`), on semantic tasks and step-by-step tasks.
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with
# SmolLM2 converted and cached; {glue:text}`rerun_cold` from a cold cache.
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **The claim.** {cite:t}`sun2024painters`, *Transformer Layers as Painters*, picture
# a frozen transformer as an assembly line of painters passing a canvas along: each layer reads
# the residual stream, adds its strokes, and passes it on. Without any fine-tuning they change
# how the *middle* layers of Llama2-7B/13B and BERT-Large execute, keeping the first and last
# $N$ layers intact, and ask eight questions:
#
# 1. Do the layers share a representation space? (yes, the middle ones: Figs 2–3)
# 2. Are all layers necessary? (no: skipping some degrades gracefully, Fig 4)
# 3. Do the middle layers all do the same thing? (no: repeating the centre layer is the worst
#    variant, Fig 5)
# 4. Does the order matter? (somewhat: reversed and random orders degrade gracefully, random
#    less than reversed, Figs 6–7)
# 5. Can the layers run in parallel? (yes, except for maths: Fig 8)
# 6. Does order matter more for some tasks? (yes: step-by-step reasoning suffers most)
# 7. Does looping help parallel layers? (yes, and the best number of loops grows with the
#    number of parallel layers: Figs 9–10)
# 8. Which variant hurts least? (random order and looped parallel; repeating the middle layer
#    hurts most: Fig 11)
#
# **The experiment.** We ask the same questions of the two pretrained models that ship with
# this book: SmolLM2-135M (a 30-layer Llama decoder) and all-MiniLM-L6-v2 (a 6-layer BERT
# encoder), on an offline benchmark that keeps the paper's split between tasks that depend on
# semantics and tasks that need step-by-step processing.

# %% tags=["parameters"]
model_name = "smollm2-135m"  # [model] a Llama decoder; "meta-llama/Llama-2-7b-hf" with a hub and a GPU
encoder_name = "minilm-l6"  # [model] a BERT encoder; "bert-large-uncased" with a hub
seed = 0  # [min 0]
n_items = 200  # [> 0] items per task
n_grid = (4, 8, 12)  # [non-empty, min 1] N: layers kept intact at each end of the decoder
n_shuffles = 10  # [> 0] random orders per N (the paper's Fig 7 uses 10 seeds)
max_loops = 8  # [min 1] looped-parallel iterations in the heat map
dtype = "bfloat16"  # [one of bfloat16|float32|float64] fast where the CPU has bf16 units; checked below
device = "cpu"  # [one of cpu|cuda] "cuda" for a 7B model
quick = False  # a small run for CI

# %% tags=["setup"]
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown, display

import resid
from resid import book, data, plans, tasks
from resid.book import verdict

warnings.filterwarnings("ignore", message="IProgress not found")  # no notebook progress bars here
if quick:
    n_items, n_grid, n_shuffles, max_loops = 40, (8,), 2, 2
n_windows = 6 if quick else 16  # 256-token windows of documentation for perplexity and word recall
torch.manual_seed(seed)
sns.set_theme(style="whitegrid", context="notebook")
started = time.time()
model = resid.load(model_name, dtype=getattr(torch, dtype), device=device)
T = model.cfg.n_layers
print(f"{model_name}: {T} blocks, d_model={model.cfg.d_model}, computing in {dtype}")

# %% [markdown]
# ## The benchmark, validated on the full model
#
# The paper's benchmarks (ARC, HellaSwag, GSM8K, WinoGrande, LAMBADA; GLUE for BERT) cannot be
# downloaded here, so we build tasks with exact answers from text every machine has (the
# Python documentation) or generate them:
#
# - *semantic*: perplexity on held-out windows of the documentation; **word recall**, a
#   LAMBADA-style test (predict a whole word that already occurred earlier in the passage); and
#   **true continuation**, a HellaSwag-like choice of a sentence's real continuation among
#   continuations of other sentences, scored by log-likelihood;
# - *step-by-step*: two-digit addition, one- and two-step word problems in the GSM8K spirit,
#   counting symbols, and reversing or copying a list of digits. These are few-shot: each row
#   packs worked examples and then the items one per line.
#
# A generated answer counts as right when every answer token is the model's top prediction
# given the tokens before it (greedy decoding would produce it). A task the full model cannot
# do, scoring less than 10 points above chance, says nothing about the variants: it is dropped.

# %%
suite = tasks.decoder_suite(model, n_items=n_items, n_windows=n_windows, seed=seed)
full = tasks.score_plans(model, suite, [plans.identity(T)])[0]
model32 = resid.load(model_name, device=device)
full32 = tasks.score_plans(model32, suite[:1], [plans.identity(T)])[0]
del model32
rows = []
for task in suite:
    usable = task.kind == "loss" or full[task.name] >= task.chance + 0.1
    rows.append({"task": task.name, "family": task.family, "what": task.description, "items": task.n_items,
                 "full model": full[task.name], "chance": task.chance, "kept": usable})  # fmt: skip
validation = pd.DataFrame(rows)
kept = [t for t, ok in zip(suite, validation["kept"], strict=True) if ok]
dropped = validation.loc[~validation["kept"], "task"].tolist()
display(validation.style.format({"full model": "{:.3f}", "chance": "{:.3g}"}).hide(axis="index"))
display(Markdown(
    f"Perplexity of the full model: {full['perplexity']:.3f} in {dtype}, {full32['perplexity']:.3f} in "
    f"float32 (a {100 * abs(full['perplexity'] / full32['perplexity'] - 1):.2f}% difference), so the "
    f"variants below run in {dtype}. "
    + (f"Dropped, because the full model is not clearly above chance: {', '.join(dropped)}."
       if dropped else "Every task is kept.")))  # fmt: skip

# %% [markdown]
# ## Q1. Do the layers share a representation space?
#
# The paper's Fig 3: the cosine similarity between the hidden states of every pair of layers,
# averaged over tokens. We read the residual stream at every layer boundary (0 = embedding).

# %%
windows = suite[0].tokens[: (2 if quick else 8)]
stream = model.residual_stream(windows.to(device)).float().cpu()  # [boundary, token, d_model]


def layer_similarity(h: torch.Tensor) -> np.ndarray:
    unit = torch.nn.functional.normalize(h, dim=-1)
    return torch.einsum("itd,jtd->ijt", unit, unit).mean(-1).numpy()


similarity = layer_similarity(stream)
energy = stream.pow(2).sum(1).sum(0)  # per coordinate, over boundaries and tokens
n_drop = 5
heavy = energy.topk(n_drop).indices
without = stream.clone()
without[..., heavy] = 0
similarity_without = layer_similarity(without)

encoder = resid.load(encoder_name, device=device)
sentences = [
    p for p in (" ".join(q.split()) for q in data.corpus("pydoc").split("\n\n")) if 40 < len(p) < 300
]
sentences = sentences[:: max(1, len(sentences) // (64 if quick else 256))][: (64 if quick else 256)]
enc_tokens, enc_mask = encoder.tokenizer.batch(sentences)
with torch.no_grad():
    _, cache = encoder.run_with_cache(
        enc_tokens.to(device), encoder.resid_names(), attention_mask=enc_mask.to(device)
    )
enc_stream = torch.stack([cache[n].cpu() for n in encoder.resid_names()])[:, enc_mask.bool()]
enc_similarity = layer_similarity(enc_stream)

# %% tags=["plot"]
fig, axes = plt.subplots(1, 3, figsize=(10, 3.6))
for ax, matrix, title in [
    (axes[0], similarity, f"{model_name}"),
    (axes[1], similarity_without, f"{model_name}, without its {n_drop} heaviest dims"),
    (axes[2], enc_similarity, f"{encoder_name}"),
]:
    sns.heatmap(matrix, vmin=0, vmax=1, cmap="viridis", square=True, ax=ax, cbar_kws={"shrink": 0.8})
    ax.set(title=title, xlabel="layer boundary", ylabel="layer boundary")
plt.tight_layout()
plt.show()

# %%
middle = slice(2, T - 1)
block = similarity[middle, middle][np.triu_indices(T - 3, 1)]
block_without = similarity_without[middle, middle][np.triu_indices(T - 3, 1)]
display(Markdown(
    f"Between boundaries 2 and {T - 2} the mean similarity is {block.mean():.2f}; with the {n_drop} "
    f"coordinates that hold the most energy ({', '.join(map(str, heavy.tolist()))}) set to zero it is "
    f"{block_without.mean():.2f}. Part of the shared space is a few privileged coordinates that every "
    "middle layer carries along (the massive activations of the outliers chapter)."))  # fmt: skip

# %% [markdown]
# The paper's Fig 2 asks the same of single layers: what happens when one layer is skipped, or
# two neighbours swap places? We measure perplexity (the cheapest task) for every position.

# %%
ppl_task = [tasks.perplexity_task(suite[0].tokens[: n_windows // 2], model.cfg.vocab_size)]
full_sweep_ppl = tasks.score_plans(model, ppl_task, [plans.identity(T)])[0]["perplexity"]
layers_swept = range(0, T, 5) if quick else range(T)
single_skips = [plans.skip(T, i, i) for i in layers_swept]
swaps = [plans.swap(T, i) for i in layers_swept if i < T - 1]
ppl_skip = [r["perplexity"] for r in tasks.score_plans(model, ppl_task, single_skips)]
ppl_swap = [r["perplexity"] for r in tasks.score_plans(model, ppl_task, swaps)]
max_abs = stream.abs().amax(dim=(1, 2)).numpy()
creates_massive = int(np.argmax(np.diff(np.log(max_abs + 1e-6))))  # block with the largest jump in max |x|

# %% tags=["plot"]
fig, ax = plt.subplots(figsize=(9, 3.6))
ax.plot(list(layers_swept), ppl_skip, marker="o", label="skip layer i")
ax.plot([i + 0.5 for i in layers_swept if i < T - 1], ppl_swap, marker="s", label="swap layers i and i+1")
ax.axhline(full_sweep_ppl, color="grey", ls="--", label="full model")
ax.axvline(creates_massive, color="C3", ls=":", label=f"layer {creates_massive}: largest jump of max |x|")
ax.set(yscale="log", xlabel="layer", ylabel="perplexity", title=f"{model_name}: one layer skipped or swapped")
ax.legend(fontsize=9)
plt.show()

# %%
skip_ppl = dict(zip(layers_swept, ppl_skip, strict=True))
inner = [i for i in layers_swept if 0 < i < T - 1]
robust = [i for i in inner if skip_ppl[i] < 1.5 * full_sweep_ppl]
display(Markdown(
    f"On {ppl_task[0].tokens.numel():,} tokens (full model: {full_sweep_ppl:.2f}), skipping one layer keeps "
    f"perplexity within 1.5× for {len(robust)} of the {len(inner)} inner layers tried; skipping layer 0 "
    f"gives {skip_ppl[0]:,.0f}"
    + (f", layer {creates_massive} {skip_ppl[creates_massive]:,.1f}." if creates_massive in skip_ppl else ".")
))  # fmt: skip

# %% [markdown]
# ### Exercise 9.1: plans that are the same plan
#
# A plan (`resid.plans`) is a tuple of steps; a step of several layers runs them on one input and
# averages their outputs. **Predict** which of these compute exactly the full model:
# `plans.parallel(T, 10, 10)`, `plans.middle_repeat(T, 10, 10)`, `plans.parallel(T, 10, 11)`;
# and whether `plans.reverse(T, 10, 11)` equals `plans.swap(T, 10)`. Check with
# `plans.run_plan` on two windows.

# %% tags=["hide-cell", "solution"]
two = windows[:2].to(device)
full_logits = plans.run_plan(model, two, plans.identity(T))
candidates = {
    "parallel(10, 10)": plans.run_plan(model, two, plans.parallel(T, 10, 10)),
    "middle_repeat(10, 10)": plans.run_plan(model, two, plans.middle_repeat(T, 10, 10)),
    "parallel(10, 11)": plans.run_plan(model, two, plans.parallel(T, 10, 11)),
}
same_as_full = {name: bool(torch.equal(out, full_logits)) for name, out in candidates.items()}
reverse_is_swap = torch.equal(plans.run_plan(model, two, plans.reverse(T, 10, 11)),
                              plans.run_plan(model, two, plans.swap(T, 10)))  # fmt: skip
assert same_as_full == {"parallel(10, 10)": True, "middle_repeat(10, 10)": True, "parallel(10, 11)": False}
assert reverse_is_swap and plans.reverse(T, 10, 11) == plans.swap(T, 10)
print(f"identical to the full model: {same_as_full}; reverse(10, 11) is swap(10): {reverse_is_swap}")

# %% [markdown]
# ## Q2–Q5, Q7: the variants
#
# Each variant keeps the first $N$ and last $N$ layers and changes the $M = T - 2N$ in between:
#
# | variant | middle layers | paper |
# |---|---|---|
# | skip | removed | Fig 4 |
# | middle repeat | each replaced by the centre layer | Fig 5 |
# | reverse | run in reverse order | Fig 6 |
# | random order | shuffled (mean ± sd over seeds) | Fig 7 |
# | parallel | all read the same input, outputs averaged | Fig 8 |
# | looped parallel | the average fed back 3 times | Fig 9 |
#
# Scores are normalised per task: 1 is the full model, 0 is chance (for perplexity, in log
# space against a uniform guess over the vocabulary), so tasks can share an axis. A broken
# model can do worse than a uniform guess (it stops writing numbers at all); we count that as
# chance, 0, so that one collapsed task does not dominate an average. The raw scores follow.

# %%
sweep = plans.paper_sweep(T, n_grid, n_shuffles, seed=seed)
keys = [(variant, n, s) for variant, n, s, _ in sweep]
plan_list = [plan for *_, plan in sweep]
sweep_start = time.time()
scores = tasks.score_plans(model, kept, plan_list)
sweep_seconds = time.time() - sweep_start
by_name = {t.name: t for t in kept}
records = [
    {"variant": v, "N": n, "M": T - 2 * n, "seed": s, "task": name, "family": by_name[name].family,
     "score": score, "normalised": max(0.0, by_name[name].normalised(score, full[name]))}
    for (v, n, s), result in zip(keys, scores, strict=True) for name, score in result.items()
]  # fmt: skip
results = pd.DataFrame(records)
print(f"{len(plan_list)} plans x {len(kept)} tasks in {sweep_seconds:.0f} s")

# %% tags=["plot"]
order = ["skip", "middle repeat", "reverse", "random order", "parallel", "looped parallel"]
# two panels a row, so that the figure with its legend stays within the text width
grid = sns.relplot(
    data=results, x="N", y="normalised", hue="task", style="family", col="variant", col_order=order,
    col_wrap=2, kind="line", marker="o", errorbar="sd", height=2.6, aspect=1.3,
)  # fmt: skip
for ax in grid.axes.flat:
    ax.axhline(1, color="grey", ls="--", lw=1)
    ax.axhline(0, color="black", ls=":", lw=1)
grid.set_axis_labels("N (layers kept at each end)", "score (1 = full, 0 = chance)")
grid.figure.suptitle(f"{model_name}: every variant, every task (random order: mean ± sd over seeds)", y=1.02)
plt.show()

# %% [markdown]
# The raw scores behind the normalised ones, at each $N$ (random order: mean over seeds):

# %%
raw = results.groupby(["variant", "N", "task"])["score"].mean().unstack("task")
baseline_row = pd.DataFrame([{t.name: full[t.name] for t in kept}], index=pd.MultiIndex.from_tuples(
    [("full model", T // 2)], names=["variant", "N"]))  # fmt: skip
pd.concat([baseline_row, raw]).style.format("{:.3f}")

# %% [markdown]
# ### Exercise 9.2: a parallel step by hand
#
# Run SmolLM2 with layers 10–13 in parallel without `resid.plans`: embed the tokens
# (`model.embed_tokens`), get the rotary tables and mask from `model.context(n_positions)`, run
# the blocks in order up to 9, then give blocks 10–13 the same input and average their outputs,
# then the rest, then `model.head`. Check against `plans.run_plan(model, tokens,
# plans.parallel(T, 10, 13))`.

# %% tags=["hide-cell", "solution"]
with torch.no_grad():
    context = model.context(two.shape[1])
    x = model.embed_tokens(two)
    for layer_block in model.blocks[:10]:
        x = layer_block(x, *context)
    x = torch.stack([model.blocks[i](x, *context) for i in range(10, 14)]).mean(0)
    for layer_block in model.blocks[14:]:
        x = layer_block(x, *context)
    by_hand = model.head(x)
from_plans = plans.run_plan(model, two, plans.parallel(T, 10, 13))
assert torch.allclose(by_hand.float(), from_plans.float(), atol=1e-3)
print("the same logits")

# %% [markdown]
# ### Exercise 9.3: why a parallel step needs loops
#
# Each block adds an update to the residual stream, $x \mapsto x + \Delta_i(x)$, so averaging
# the outputs of $M$ blocks that read the same $x$ adds the *mean* of their updates. **Predict**:
# is the parallel step's update of layers 10–13 larger or smaller than the sequential blocks'
# total update, and by roughly what factor? Check the norms on the two windows.

# %% tags=["hide-cell", "solution"]
with torch.no_grad():
    x = model.embed_tokens(two)
    for layer_block in model.blocks[:10]:
        x = layer_block(x, *context)
    parallel_out = torch.stack([model.blocks[i](x, *context) for i in range(10, 14)]).mean(0)
    sequential_out = x
    for i in range(10, 14):
        sequential_out = model.blocks[i](sequential_out, *context)
    parallel_update = (parallel_out - x).float().norm(dim=-1).median().item()
    sequential_update = (sequential_out - x).float().norm(dim=-1).median().item()
assert parallel_update < sequential_update
print(f"median update norm per token: parallel {parallel_update:.1f}, sequential {sequential_update:.1f} "
      f"({sequential_update / parallel_update:.1f}x). Looping feeds the average back, taking more steps "
      "of that size.")  # fmt: skip

# %% [markdown]
# ## Q7. How many loops should parallel layers take?
#
# The paper's Fig 10: perplexity for every number of parallel layers $M$ and iterations, the
# best iteration count per $M$ marked.

# %%
loop_plans, loop_keys = [], []
for n in n_grid:
    for loops in range(1, max_loops + 1):
        loop_plans.append(plans.parallel(T, n, T - n - 1, loops=loops))
        loop_keys.append((T - 2 * n, loops))
loop_ppl = [r["perplexity"] for r in tasks.score_plans(model, ppl_task, loop_plans)]  # fewer windows
heat = pd.DataFrame([(m, k, p) for (m, k), p in zip(loop_keys, loop_ppl, strict=True)],
                    columns=["parallel layers M", "iterations", "perplexity"])  # fmt: skip
table = heat.pivot(index="iterations", columns="parallel layers M", values="perplexity")

# %% tags=["plot"]
fig, ax = plt.subplots(figsize=(6, 4))
sns.heatmap(np.log10(table), annot=table.map(lambda v: f"{v:,.0f}"), fmt="", cmap="magma_r", ax=ax,
            cbar_kws={"label": "log10 perplexity"})  # fmt: skip
for col, m in enumerate(table.columns):
    best = int(np.argmin(table[m].to_numpy()))
    ax.add_patch(plt.Rectangle((col, best), 1, 1, fill=False, edgecolor="red", lw=2.5))
ax.set(title=f"{model_name}: looped parallel (red: best iterations per M)")
plt.show()

# %%
best_loops = {int(m): int(table[m].idxmin()) for m in table.columns}

# %% [markdown]
# ## The encoder
#
# MiniLM is a sentence-embedding model without its masked-LM head, so we measure what it is
# for: **embedding agreement** (cosine between a sentence's embedding under a variant and
# under the full model, on documentation sentences) and **paraphrase ranking** (is a generated
# paraphrase closer to its sentence than a sentence with the same subject and another action?
# chance 0.5). The first says how much a variant changes the output; the second whether the
# output still carries meaning.

# %%
Te = encoder.cfg.n_layers
triples = tasks.paraphrase_triples(n_items, seed=seed)
texts = [s for triple in triples for s in triple]
enc_grid = [n for n in range(1, Te // 2)]
enc_sweep = plans.paper_sweep(Te, enc_grid, n_shuffles, seed=seed)
enc_plans = [plans.identity(Te)] + [plan for *_, plan in enc_sweep]
enc_keys = [("full model", Te // 2, 0)] + [(variant, n, s) for variant, n, s, _ in enc_sweep]
doc_embeddings = tasks.embed_under_plans(encoder, sentences, enc_plans)
pair_embeddings = tasks.embed_under_plans(encoder, texts, enc_plans)
enc_rows = []
for (variant, n, s), docs, pairs in zip(enc_keys, doc_embeddings, pair_embeddings, strict=True):
    anchor, para, other = pairs[0::3], pairs[1::3], pairs[2::3]
    enc_rows.append({
        "variant": variant, "N": n, "seed": s,
        "agreement": (docs * doc_embeddings[0]).sum(-1).mean().item(),
        "paraphrase ranking": ((anchor * para).sum(-1) > (anchor * other).sum(-1)).float().mean().item(),
    })  # fmt: skip
enc_results = pd.DataFrame(enc_rows)
enc_full = enc_results.iloc[0]

# %% tags=["plot"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for ax, metric, chance in [(axes[0], "agreement", None), (axes[1], "paraphrase ranking", 0.5)]:
    sns.lineplot(data=enc_results[enc_results.variant != "full model"], x="N", y=metric, hue="variant",
                 hue_order=order, marker="o", errorbar="sd", ax=ax)  # fmt: skip
    ax.axhline(enc_full[metric], color="grey", ls="--", label="full model")
    if chance is not None:
        ax.axhline(chance, color="black", ls=":", label="chance")
    ax.set(xlabel="N (layers kept at each end)", xticks=enc_grid)
    ax.legend(fontsize=8)
fig.suptitle(f"{encoder_name} ({Te} layers): variants of the middle layers")
plt.tight_layout()
plt.show()

# %%
display(Markdown(
    f"The full encoder ranks the paraphrase first for {enc_full['paraphrase ranking']:.1%} of "
    f"{len(triples)} triples."
    + (" It cannot do this task, so the ranking panel says nothing about the variants."
       if enc_full["paraphrase ranking"] < 0.6 else "")))  # fmt: skip

# %% [markdown]
# ## Q6 and Q8. Which tasks suffer, and which variant hurts least?
#
# The paper's Fig 11 puts every variant on one plot (the median over benchmarks); we show the
# mean normalised score over tasks, and the same split by task family.

# %%
per_plan = results.groupby(["variant", "N", "seed", "family"])["normalised"].mean().reset_index()
overall = results.groupby(["variant", "N", "seed"])["normalised"].mean().reset_index()

# %% tags=["plot"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
sns.lineplot(data=overall, x="N", y="normalised", hue="variant", hue_order=order, marker="o",
             errorbar="sd", ax=axes[0])  # fmt: skip
axes[0].set(title="all tasks (Fig 11)", ylabel="mean score (1 = full, 0 = chance)")
family_means = per_plan.groupby(["variant", "family"])["normalised"].mean().unstack("family").loc[order]
family_means.plot.bar(ax=axes[1], rot=20)
axes[1].set(title="by task family, averaged over N", ylabel="mean score (1 = full, 0 = chance)")
for ax in axes:
    ax.axhline(0, color="black", ls=":", lw=1)
    ax.axhline(1, color="grey", ls="--", lw=1)
fig.suptitle(model_name)
plt.tight_layout()
plt.show()

# %%
mean_by_variant = overall.groupby("variant")["normalised"].mean()
ranking = mean_by_variant.sort_values(ascending=False)
stepwise_gap = (family_means[tasks.SEMANTIC] - family_means[tasks.STEPWISE]).drop(["skip"], errors="ignore")
looped_gain = (overall[overall.variant == "looped parallel"].groupby("N")["normalised"].mean()
               - overall[overall.variant == "parallel"].groupby("N")["normalised"].mean())  # fmt: skip
enc_mean = enc_results[enc_results.variant != "full model"].groupby("variant")["agreement"].mean()
smallest_m = max(n_grid)
at_small = overall[overall.N == smallest_m].groupby("variant")["normalised"].mean()
loops_rise = list(best_loops.values()) == sorted(best_loops.values())  # keys: M ascending


questions = pd.DataFrame([
    {"question": "1. Do the layers share a representation space?",
     "paper": "yes for the middle layers (Figs 2–3)",
     "ours": f"middle-block cosine {block.mean():.2f} ({block_without.mean():.2f} without {n_drop} dims); "
             f"{len(robust)}/{len(inner)} single skips within 1.5× perplexity",
     "verdict": verdict(block.mean() > 0.5 and len(robust) > len(inner) / 2,
                        partly=block.mean() > 0.5 or len(robust) > len(inner) / 2)},
    {"question": "2. Are all layers necessary?",
     "paper": "no: skipping degrades gracefully (Fig 4)",
     "ours": f"skipping {T - 2 * smallest_m} middle layers keeps {at_small['skip']:.2f} of the score",
     "verdict": verdict(at_small["skip"] > 0.5, partly=at_small["skip"] > 0.2)},
    {"question": "3. Do the middle layers do the same thing?",
     "paper": "no: middle repeat is worst (Fig 5)",
     "ours": f"middle repeat {mean_by_variant['middle repeat']:.2f} vs skip {mean_by_variant['skip']:.2f}",
     "verdict": verdict(mean_by_variant["middle repeat"] < mean_by_variant["skip"])},
    {"question": "4. Does the layer order matter?",
     "paper": "somewhat; random beats reverse (Figs 6–7)",
     "ours": f"random {mean_by_variant['random order']:.2f}, reverse {mean_by_variant['reverse']:.2f}",
     "verdict": verdict(mean_by_variant["random order"] > mean_by_variant["reverse"]
                        and mean_by_variant["random order"] > 0.2,
                        partly=mean_by_variant["random order"] > mean_by_variant["reverse"])},
    {"question": "5. Can the layers run in parallel?",
     "paper": "yes, gracefully, except maths (Fig 8)",
     "ours": f"parallel keeps {at_small['parallel']:.2f} at M={T - 2 * smallest_m}, "
             f"{mean_by_variant['parallel']:.2f} on average",
     "verdict": verdict(at_small["parallel"] > 0.5, partly=at_small["parallel"] > 0.2)},
    {"question": "6. Does order matter more for step-by-step tasks?",
     "paper": "yes: ARC/GSM8K drop most",
     "ours": f"semantic minus step-by-step score, per variant: {stepwise_gap.round(2).to_dict()}",
     "verdict": verdict(bool((stepwise_gap > 0).all()), partly=bool((stepwise_gap > 0).mean() >= 0.5))},
    {"question": "7. Does looping help parallel layers?",
     "paper": "yes; best loop count grows with M (Figs 9–10)",
     "ours": f"looped − parallel by N: {looped_gain.round(2).to_dict()}; best loops per M: {best_loops}",
     "verdict": verdict(bool((looped_gain > 0).all()) and loops_rise, partly=bool((looped_gain > 0).any()))},
    {"question": "8. Which variant hurts least?",
     "paper": "random order and looped parallel; middle repeat worst (Fig 11)",
     "ours": "decoder, best to worst: " + ", ".join(ranking.index)
             + "; encoder agreement best: " + enc_mean.idxmax(),
     "verdict": verdict(set(ranking.index[:2]) == {"random order", "looped parallel"}
                        and ranking.index[-1] == "middle repeat",
                        partly=ranking.index[-1] == "middle repeat"
                        or set(ranking.index[:2]) & {"random order", "looped parallel"} != set())},
])  # fmt: skip

# %% [markdown]
# ## Takeaways
#
# The verdicts behind these are in the table that closes the chapter.

# %%
n_reproduced = int((questions["verdict"] == "reproduced").sum())
n_partly = int((questions["verdict"] == "partly").sum())
takeaways = [
    f"Of the paper's eight answers, {n_reproduced} hold for {model_name} as they did for Llama2-7B "
    f"({n_partly} partly). The comparison spans a 50x difference in size: a small model has fewer "
    "layers doing overlapping work, so expect less slack wherever ours differ.",
    f"Changing {T - 2 * max(n_grid)} middle layers at once keeps, on average over tasks, "
    + ", ".join(f"{v} {at_small[v]:.2f}" for v in order)
    + " of the full model's margin over chance.",
    f"The middle layers' hidden states are alike (cosine {block.mean():.2f}), but {n_drop} heavy "
    f"coordinates carry part of that: without them it is {block_without.mean():.2f}. The privileged "
    "basis of the first chapter shows up here as a shared representation space.",
]
if creates_massive in skip_ppl:
    rank = sorted(ppl_skip, reverse=True).index(skip_ppl[creates_massive]) + 1
    takeaways.append(
        f"Skipping layer {creates_massive}, which creates the massive activation, gives perplexity "
        f"{skip_ppl[creates_massive]:,.1f}: number {rank} from the costliest of {len(ppl_skip)} single skips."
    )
display(Markdown("\n".join(f"- {t}" for t in takeaways)))

# %% [markdown]
# (claims-painters)=
# ## The eight questions, theirs and ours
#
# Each verdict is computed from the measurements above; "reproduced" means the paper's answer
# holds for our models, "partly" that it holds for one model or one part.

# %%
questions.style.hide(axis="index")

# %%
chapter_results = {
    "chapter": "painters",
    "model": model_name,
    "encoder": encoder_name,
    "dtype": dtype,
    "seed": seed,
    "quick": quick,
    "full_model": full,
    "full_model_float32_perplexity": full32["perplexity"],
    "dropped_tasks": dropped,
    "middle_similarity": float(block.mean()),
    "middle_similarity_without_heavy_dims": float(block_without.mean()),
    "single_skip_perplexity": ppl_skip,
    "mean_normalised_by_variant": mean_by_variant.to_dict(),
    "best_loops_per_m": best_loops,
    "claims": questions.to_dict(orient="records"),
    "sweep_seconds": sweep_seconds,
    "seconds": time.time() - started,
}
rerun = {"model_name": model_name, "encoder_name": encoder_name, "n_items": n_items, "seed": seed}
book.save_results(chapter_results, rerun=rerun)
