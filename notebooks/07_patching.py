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
# # Patching: causal interventions, paths and circuits
#
# :::{admonition} What this chapter reproduces, and how to rerun it
# :class: tip
# **Reproduces** the causal methods of {cite:t}`ferrando2024primer`: activation patching with
# zero, mean, resample and noise interventions under logit-difference and KL metrics, path
# patching, and circuit discovery by edge attribution patching {cite:p}`nanda2023attribution,syed2023eap`
# against exact patching and ACDC {cite:p}`conmy2023acdc`, on SmolLM2's indirect-object
# identification {cite:p}`wang2023ioi` and a two-layer induction model trained here.
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with
# SmolLM2 and the induction model cached; {glue:text}`rerun_cold` from a cold cache.
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **The claims.** Attribution says what a prediction *correlates* with; the Primer's causal
# methods change an activation and watch the output. *Activation patching* replaces one
# component's activation by another value: zero, the mean over a counterfactual set, the
# value on one counterfactual prompt (resampling), or the value on a noised input. The Primer
# warns that the choice matters (zero and noise push the model off its own distribution) and
# that a metric must be chosen too (logit difference, KL divergence). *Path patching*
# restricts the change to one path: a sender head's effect through one receiver only. Seeing
# the model as a graph of edges, *edge attribution patching* (EAP) estimates every edge's
# patching effect at once from one backward pass, where ACDC prunes edges one forward pass at
# a time.
#
# **The experiment.** Indirect-object identification on SmolLM2 (the task of {cite:t}`wang2023ioi`'s
# GPT-2 circuit, the Primer's main example), with its counterfactual: the same prompt naming
# the other person again, which flips the answer. Every intervention is applied to the clean
# run and the drop of the logit difference "indirect object − subject" is measured.

# %% tags=["parameters"]
model_name = "smollm2-135m"  # [model]
n_prompts = 24  # [> 0] IOI prompts for the sweeps
n_exact_edges = 120  # [min 2] edges patched exactly to check EAP (half the top-EAP ones, half random)
seed = 0  # [min 0]
quick = False  # a small run for CI

# %% tags=["setup"]
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import display

import resid
from resid import behaviours, book, patching
from resid.book import verdict

warnings.filterwarnings("ignore", message="IProgress not found")
sns.set_theme(style="whitegrid", context="notebook")
started = time.time()
if quick:
    n_prompts, n_exact_edges = 4, 6
torch.manual_seed(seed)
model = resid.load(model_name)
tokenizer = model.tokenizer

# %%
ioi = behaviours.ioi_prompts(tokenizer, max(n_prompts, 24), seed=seed)
clean, counterfactual = ioi.tokens[:n_prompts], ioi.counterfactual[:n_prompts]
answers, foils = ioi.answers[:n_prompts], ioi.foils[:n_prompts]
logit_diff = patching.LogitDiff(answers, foils)
with torch.no_grad():
    clean_logits, counter_logits = model(clean)[:, -1], model(counterfactual)[:, -1]
kl = patching.KLFromReference(clean_logits)
clean_ld, counter_ld = logit_diff(clean_logits).mean().item(), logit_diff(counter_logits).mean().item()
print(
    f"{n_prompts} prompts of {clean.shape[1]} tokens; logit difference clean {clean_ld:.2f}, "
    f"counterfactual {counter_ld:.2f}"
)
labels = ["BOS"] + [tokenizer.decode([t]) for t in clean[0, 1:].tolist()]
print("positions:", " | ".join(labels))

# %% [markdown]
# ## The residual stream, layer by position
#
# Resample patching: at one layer and one position, the residual stream of the clean run is
# replaced by the counterfactual's. Shown as the fraction of the logit difference that
# remains, $(LD_\text{patched} - LD_\text{cf}) / (LD_\text{clean} - LD_\text{cf})$: 1 is no
# effect, 0 is the counterfactual's behaviour. Each layer's positions run as one batch from
# that layer on.

# %%
t0 = time.time()
resid_names = [f"blocks.{i}.hook_resid_pre" for i in range(model.cfg.n_layers)]
resid_values = patching.interventions(model, clean, counterfactual, resid_names, seed=seed)["resample"]
resid_map = patching.patch_residual(model, clean, resid_values, logit_diff)
resid_seconds = time.time() - t0
recovered = (resid_map - counter_ld) / (clean_ld - counter_ld)

# %% tags=["plot"]
fig, ax = plt.subplots(figsize=(10, 6))
sns.heatmap(
    recovered.numpy(),
    cmap="RdBu",
    center=0.5,
    vmin=-0.2,
    vmax=1.2,
    ax=ax,
    xticklabels=labels,
    yticklabels=range(model.cfg.n_layers),
)
ax.set(
    xlabel="position patched",
    ylabel="layer (residual before the block)",
    title=f"fraction of the logit difference left after resample patching ({resid_seconds:.0f} s)",
)
plt.show()

# %% [markdown]
# Information about which name is repeated sits at the second mention of the subject (S2)
# in the early layers and moves to the final position in the middle layers, where the late
# heads read it: the same shape as {cite:t}`wang2023ioi`'s GPT-2 small circuit.

# %%
s2 = int(np.nonzero(clean[0].numpy() != counterfactual[0].numpy())[0][0])
move_layer = int(
    next(
        (layer for layer in range(model.cfg.n_layers) if recovered[layer, -1] < recovered[layer, s2]),
        model.cfg.n_layers,
    )
)
print(
    f"the position that differs is {s2} ({labels[s2]!r}); from layer {move_layer} on, patching the final "
    f"position matters more than patching S2"
)

# %% [markdown]
# ### Exercise 7.1: the first row, exactly
#
# **Predict** the first row of the map above (layer 0: the residual stream *is* the token and
# position embeddings) before looking at it closely. Where the clean and counterfactual prompts
# have the same token, what does patching change? Where they differ? What must the lost
# fractions, $1 - $ recovered, add up to over the row? Check.

# %% tags=["hide-cell", "solution"]
differs = (clean != counterfactual).any(0)  # positions where some prompt has a different token
lost = 1 - recovered[0]
assert (lost[~differs].abs() < 1e-4).all()
# each prompt differs at one position; patching it there runs the counterfactual exactly
assert ((clean != counterfactual).sum(1) == 1).all() and abs(lost.sum().item() - 1) < 1e-3
print(f"layer 0: nothing lost where the prompts agree; {lost[differs].sum().item():.4f} of the logit "
      f"difference lost over the {int(differs.sum())} position(s) where they differ.")  # fmt: skip

# %% [markdown]
# ## Every head, four interventions, two metrics
#
# Each head's output (at all positions) is replaced, one head at a time. All heads of a layer
# run in one batch from that layer on (`bench/bench_patching.py` measures the speed-up over
# one forward pass per head).

# %%
z_names = [f"blocks.{i}.attn.hook_z" for i in range(model.cfg.n_layers)]
values = patching.interventions(model, clean, counterfactual, z_names, seed=seed)
effects, seconds = {}, {}
for kind in ("zero", "mean", "resample", "noise"):
    t0 = time.time()
    both = patching.patch_heads(
        model, clean, values[kind], lambda logits: torch.stack([logit_diff(logits), kl(logits)], -1)
    )
    effects[(kind, "logit difference")], effects[(kind, "KL")] = both[..., 0] - clean_ld, both[..., 1]
    seconds[kind] = time.time() - t0

# %% tags=["plot"]
# one row per intervention, its two metrics side by side: legible at the book's text width
fig, axes = plt.subplots(4, 2, figsize=(10, 20), sharey=True)
for row, kind in enumerate(("zero", "mean", "resample", "noise")):
    for col, metric in enumerate(("logit difference", "KL")):
        grid = effects[(kind, metric)].numpy()
        limit = np.abs(grid).max()
        sns.heatmap(
            grid,
            ax=axes[row, col],
            cmap="RdBu" if col == 0 else "Reds",
            center=0 if col == 0 else None,
            vmin=-limit if col == 0 else 0,
            vmax=limit,
        )
        axes[row, col].set_title(f"{kind}: {'Δ logit diff' if col == 0 else 'KL from clean'}")
        axes[row, col].set(xlabel="head", ylabel="layer" if col == 0 else "")
plt.tight_layout()
plt.show()

# %% [markdown]
# How much do the interventions agree? The ten heads each one finds most important (by the
# drop of the logit difference), and the rank correlation of the full maps:


# %%
def top_heads(grid: torch.Tensor, k: int = 10, largest_drop: bool = True) -> list[str]:
    order = grid.flatten().argsort(descending=not largest_drop)[:k]
    return [f"L{i // model.cfg.n_heads}H{i % model.cfg.n_heads}" for i in order.tolist()]


kinds = ["zero", "mean", "resample", "noise"]
tops = {kind: top_heads(effects[(kind, "logit difference")]) for kind in kinds}
display(pd.DataFrame(tops))
flat = pd.DataFrame({kind: effects[(kind, "logit difference")].flatten().numpy() for kind in kinds})
overlap = pd.DataFrame(
    [[len(set(tops[a]) & set(tops[b])) / 10 for b in kinds] for a in kinds], index=kinds, columns=kinds
)

# %% tags=["plot"]
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
sns.heatmap(flat.corr(method="spearman"), annot=True, fmt=".2f", vmin=0, vmax=1, cmap="viridis", ax=axes[0])
axes[0].set_title("Spearman between head maps (Δ logit diff)")
sns.heatmap(overlap, annot=True, fmt=".0%", vmin=0, vmax=1, cmap="viridis", ax=axes[1])
axes[1].set_title("overlap of the top-10 heads")
plt.tight_layout()
plt.show()

# %%
ld_vs_kl = {
    kind: float(
        np.corrcoef(effects[(kind, "logit difference")].flatten().abs(), effects[(kind, "KL")].flatten())[
            0, 1
        ]
    )
    for kind in kinds
}
print(
    "correlation of |Δ logit diff| with KL per intervention:", {k: round(v, 2) for k, v in ld_vs_kl.items()}
)

# %% [markdown]
# ### Exercise 7.2: patch one head by hand, and patch with the clean value
#
# Resample-patch the head whose resampling hurts most, with a hook of your own: in
# `model.hooks([(f"blocks.{L}.attn.hook_z", fn)])`, `fn(z, hook)` returns `z` with head `H`'s
# slice replaced by the counterfactual's (`values["resample"][name]`). Compare the change of the
# logit difference with the map. Then the sanity check every patching pipeline needs:
# **predict** what `patching.patch_heads` returns when each head is "patched" with its own clean
# value, and check it on four prompts.

# %% tags=["hide-cell", "solution"]
worst = int(effects[("resample", "logit difference")].flatten().argmin())
layer, head = divmod(worst, model.cfg.n_heads)
name = f"blocks.{layer}.attn.hook_z"


def resample_one_head(z: torch.Tensor, hook) -> torch.Tensor:
    z = z.clone()
    z[:, :, head] = values["resample"][name][:, :, head]
    return z


with torch.no_grad():
    by_hand = logit_diff(model.run_with_hooks(clean, [(name, resample_one_head)])[:, -1]).mean().item()
from_map = effects[("resample", "logit difference")][layer, head].item()
assert abs((by_hand - clean_ld) - from_map) < 1e-3 * max(1.0, abs(from_map))
few = slice(0, 4)
_, clean_cache = model.run_with_cache(clean[few], z_names)
unchanged = patching.patch_heads(model, clean[few], clean_cache, patching.LogitDiff(answers[few], foils[few]))
with torch.no_grad():
    reference = patching.LogitDiff(answers[few], foils[few])(model(clean[few])[:, -1]).mean().item()
assert (unchanged - reference).abs().max() < 1e-3
print(f"L{layer}H{head}: Δ logit diff {by_hand - clean_ld:+.3f} by hand, {from_map:+.3f} in the map. "
      f"Clean patches: largest change {(unchanged - reference).abs().max().item():.1e}.")  # fmt: skip

# %% [markdown]
# ## Path patching: which heads feed the name movers?
#
# The heads whose resample patching hurts most in the late layers are the candidates for
# {cite:t}`wang2023ioi`'s *name movers* (they copy the indirect object's name to the output). Path
# patching asks which earlier heads matter *through them*: for every sender head, only the
# edges sender → receivers carry the counterfactual value; everything else, including the
# sender's other paths, is left clean.

# %%
resample = effects[("resample", "logit difference")]
late = resample[model.cfg.n_layers // 2 :]
order = late.flatten().argsort()[:3]
receivers = [
    (model.cfg.n_layers // 2 + i // model.cfg.n_heads, i % model.cfg.n_heads) for i in order.tolist()
]
graph = patching.Graph.of(model)
first_receiver_layer = min(layer for layer, _ in receivers)
sender_layers = range(first_receiver_layer - 2 if quick else 0, first_receiver_layer)
senders = [f"L{layer}H{head}" for layer in sender_layers for head in range(model.cfg.n_heads)]
t0 = time.time()
corrupted = patching.corrupted_outputs(model, counterfactual)
receiver_names = [f"L{layer}H{head}" for layer, head in receivers]
path_effect = patching.path_patching(model, clean, corrupted, logit_diff, senders, receiver_names)
path_effect = torch.cat(
    [
        torch.zeros(first_receiver_layer - len(sender_layers), model.cfg.n_heads),
        path_effect.view(len(sender_layers), model.cfg.n_heads),
    ]
)
path_seconds = time.time() - t0

# %% tags=["plot"]
fig, ax = plt.subplots(figsize=(6, 6))
limit = path_effect.abs().max().item()
sns.heatmap(path_effect.numpy(), cmap="RdBu", center=0, vmin=-limit, vmax=limit, ax=ax)
ax.set(
    xlabel="sender head",
    ylabel="sender layer",
    title="Δ logit diff, sender → " + ", ".join(f"L{a}H{b}" for a, b in receivers),
)
plt.show()

# %%
top_senders = top_heads(path_effect, k=5)
print(
    f"receivers {receivers}; strongest senders {top_senders} ({path_seconds:.0f} s for {len(senders)} "
    f"senders)"
)

# %% [markdown]
# ## Edges: EAP against exact patching, and against ACDC
#
# SmolLM2's graph has one upstream node per head and MLP (plus the embedding) and one
# downstream node per head input, MLP input and the logits: tens of thousands of edges. EAP
# scores them all from two forward passes and one backward. Exact patching, one forward per
# edge, is run on a sample: the edges EAP ranks highest and as many random ones.

# %%
eap, eap_seconds = patching.edge_attribution_patching(model, clean, counterfactual, logit_diff)
edges = graph.allowed.nonzero()
n_edges = len(edges)
ranked = edges[eap[graph.allowed].abs().argsort(descending=True)]
generator = torch.Generator().manual_seed(seed)
sample = torch.cat(
    [ranked[: n_exact_edges // 2], edges[torch.randperm(n_edges, generator=generator)[: n_exact_edges // 2]]]
)
sample_list = [tuple(e) for e in sample.tolist()]
exact, exact_seconds = patching.edge_patching(model, clean, counterfactual, logit_diff, sample_list)
eap_sample = torch.stack([eap[u, v] for u, v in sample_list])
pearson = float(np.corrcoef(eap_sample.numpy(), exact.numpy())[0, 1])

# %% tags=["plot"]
fig, ax = plt.subplots(figsize=(5, 5))
ax.scatter(exact, eap_sample, s=12)
lim = max(exact.abs().max().item(), eap_sample.abs().max().item())
ax.plot([-lim, lim], [-lim, lim], color="grey", lw=0.8)
ax.set(
    xlabel="exact Δ logit diff (one forward per edge)",
    ylabel="EAP estimate",
    title=f"{len(sample_list)} edges: r = {pearson:.2f}",
)
plt.show()

# %%
per_edge_exact = exact_seconds / len(sample_list)
print(
    f"EAP: all {n_edges} edges in {eap_seconds:.1f} s; exact: {per_edge_exact:.2f} s per edge, so "
    f"{per_edge_exact * n_edges / 3600:.1f} h for all of them"
)

# %% [markdown]
# How faithful is a circuit made of EAP's top edges? Keep the top-$k$ edges clean and corrupt
# every other one; the fraction of the logit difference that remains:

# %%
ks = [k for k in (30, 100, 300, 1000, 3000, 10000) if k < n_edges] + [n_edges]
faithfulness = []
for k in ks:
    kept = torch.zeros_like(graph.allowed)
    kept[tuple(ranked[:k].T)] = True
    value = patching.circuit_metric(model, clean, corrupted, logit_diff, kept)
    faithfulness.append(
        {"edges kept": k, "logit diff": value, "recovered": (value - counter_ld) / (clean_ld - counter_ld)}
    )
faithfulness = pd.DataFrame(faithfulness)
display(faithfulness.style.format({"logit diff": "{:.2f}", "recovered": "{:.0%}"}).hide(axis="index"))

# %% [markdown]
# ACDC needs one forward pass per edge per sweep, about an hour for SmolLM2's graph on two
# cores: it runs here on the two-layer induction model trained in the heads chapter, where
# all three methods fit. Clean prompts are repeated random tokens ending one token before the
# end of the repeat (the answer is the next token of the repeat); the counterfactual replaces
# the first pass by other random tokens, so there is nothing to copy.

# %%
from resid.heads import repeated_tokens  # noqa: E402
from resid.train import PRESETS, train  # noqa: E402

small = train(PRESETS["induction-2l"], progress=False, stop_after=60 if quick else None).model
period = 15
sequences = repeated_tokens(32, period, 256, seed=seed)
small_clean = sequences[:, :-1]
small_counter = small_clean.clone()
small_counter[:, :period] = repeated_tokens(32, period, 256, seed=seed + 1)[:, :period]
small_answers = sequences[:, -1]
small_foils = (small_answers + 1) % 256
small_metric = patching.LogitDiff(small_answers, small_foils)
small_graph = patching.Graph.of(small)
small_corrupted = patching.corrupted_outputs(small, small_counter)
small_eap, small_eap_seconds = patching.edge_attribution_patching(
    small, small_clean, small_counter, small_metric
)
small_edges = [tuple(e) for e in small_graph.allowed.nonzero().tolist()]
small_exact, small_exact_seconds = patching.edge_patching(
    small, small_clean, small_counter, small_metric, small_edges
)
small_eap_list = torch.stack([small_eap[u, v] for u, v in small_edges])
small_pearson = float(np.corrcoef(small_eap_list.numpy(), small_exact.numpy())[0, 1])
small_clean_ld = small_metric(small(small_clean)[:, -1]).mean().item()
small_counter_ld = small_metric(small(small_counter)[:, -1]).mean().item()


def small_recovered(kept: torch.Tensor) -> float:
    value = patching.circuit_metric(small, small_clean, small_corrupted, small_metric, kept)
    return (value - small_counter_ld) / (small_clean_ld - small_counter_ld)


rows = []
for threshold in (0.001, 0.01, 0.03, 0.1, 0.3):
    kept, acdc_seconds, passes = patching.acdc(small, small_clean, small_counter, threshold)
    rows.append(
        {
            "method": "ACDC",
            "setting": f"τ = {threshold}",
            "edges kept": int(kept.sum()),
            "recovered": small_recovered(kept),
            "seconds": acdc_seconds,
            "forward passes": passes,
        }
    )
small_ranked = small_graph.allowed.nonzero()[small_eap[small_graph.allowed].abs().argsort(descending=True)]
for k in sorted({r["edges kept"] for r in rows} | {len(small_edges)}):
    kept = torch.zeros_like(small_graph.allowed)
    kept[tuple(small_ranked[:k].T)] = True
    rows.append(
        {
            "method": "EAP top-k",
            "setting": f"k = {k}",
            "edges kept": k,
            "recovered": small_recovered(kept),
            "seconds": small_eap_seconds,
            "forward passes": 2,
        }
    )
comparison = pd.DataFrame(rows)

# %% tags=["plot"]
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
axes[0].scatter(small_exact, small_eap_list, s=14)
axes[0].set(
    xlabel="exact Δ logit diff",
    ylabel="EAP estimate",
    title=f"induction model, all {len(small_edges)} edges: r = {small_pearson:.2f}",
)
for method, group in comparison.groupby("method"):
    axes[1].plot(group["edges kept"], group["recovered"], marker="o", label=method)
axes[1].set(
    xlabel="edges kept", ylabel="fraction of logit diff recovered", title="faithfulness vs circuit size"
)
axes[1].legend()
plt.tight_layout()
plt.show()

# %%
display(comparison.style.format({"recovered": "{:.0%}", "seconds": "{:.2f}"}).hide(axis="index"))
print(f"induction model: clean logit diff {small_clean_ld:.2f}, counterfactual {small_counter_ld:.2f}")

# %% [markdown]
# ### Exercise 7.3: the two ends of a circuit
#
# `patching.circuit_metric(model, clean, corrupted, metric, kept)` runs the clean prompt with
# every edge outside `kept` carrying its value from the counterfactual run. **Predict** the
# fraction recovered (`small_recovered`) when `kept` holds every edge of the graph, and when it
# holds none. Check both on the induction model. Why is the second one not obvious for a graph
# whose only inputs are the embedding's edges?

# %% tags=["hide-cell", "solution"]
every_edge = small_graph.allowed.clone()
no_edge = torch.zeros_like(small_graph.allowed)
all_kept, none_kept = small_recovered(every_edge), small_recovered(no_edge)
assert abs(all_kept - 1) < 1e-3 and abs(none_kept) < 1e-3
print(f"every edge kept: {all_kept:.4f}; none: {none_kept:.4f}. With none kept every node reads only "
      "corrupted values, including the embedding's, so the run is the counterfactual's exactly.")  # fmt: skip

# %% [markdown]
# **Takeaways.** On SmolLM2 the IOI behaviour has the shape {cite:t}`wang2023ioi` found in GPT-2 small:
# the repeated name's position matters in the early layers, the final position in the late
# ones, and a few late heads carry the answer. Which heads look important depends on the
# intervention: zero and noise ablation share only part of their top ten with resampling,
# the one intervention that stays on the model's own distribution. EAP's estimates follow
# exact patching on SmolLM2's IOI edges, at a tiny fraction of the cost, but not on the
# small induction model, where its top edges make a circuit that recovers almost nothing
# and ACDC's greedy search, one forward pass per edge, finds a small faithful one. A linear
# estimate is only as good as the model is linear in the edge.

# %% [markdown]
# (claims-patching)=
# ## The Primer's claims beside ours

# %%
zero_vs_resample = overlap.loc["zero", "resample"]
noise_vs_resample = overlap.loc["noise", "resample"]
acdc_rows = comparison[comparison.method == "ACDC"]
best_acdc = acdc_rows.loc[acdc_rows["recovered"].idxmax()]
eap_same_size = comparison[
    (comparison.method == "EAP top-k") & (comparison["edges kept"] == best_acdc["edges kept"])
]
eap_at_acdc = float(eap_same_size["recovered"].iloc[0]) if len(eap_same_size) else float("nan")
claims = pd.DataFrame(
    [
        {
            "claim": "the choice of intervention changes which components look important",
            "primer": "zero and noise ablation are off-distribution (ecological validity)",
            "ours": f"top-10 heads shared with resample: zero {zero_vs_resample:.0%}, noise "
            f"{noise_vs_resample:.0%}, "
            f"mean {overlap.loc['mean', 'resample']:.0%}",
            "verdict": verdict(zero_vs_resample < 0.7, partly=zero_vs_resample < 1.0),
        },
        {
            "claim": "information moves from the subject's position to the final one",
            "primer": "IOI circuit in GPT-2 small",
            "ours": f"patching S2 matters early, the final position from layer {move_layer} of "
            f"{model.cfg.n_layers}",
            "verdict": verdict(0 < move_layer < model.cfg.n_layers, partly=move_layer < model.cfg.n_layers),
        },
        {
            "claim": "late heads move the indirect object's name",
            "primer": "name-mover heads",
            "ours": "resample patching of "
            + ", ".join(f"L{a}H{b}" for a, b in receivers)
            + " lowers the logit diff by "
            + ", ".join(f"{-resample[a, b].item():.2f}" for a, b in receivers),
            "verdict": verdict(
                resample[receivers[0]].item() < -0.1 * clean_ld, partly=resample[receivers[0]].item() < 0
            ),
        },
        {
            "claim": "EAP approximates patching with 2 forward + 1 backward passes",
            "primer": "Nanda 2023; Syed et al. 2023",
            "ours": f"r = {pearson:.2f} on {len(sample_list)} SmolLM2 edges, r = {small_pearson:.2f} on "
            f"the induction model; "
            f"{eap_seconds:.1f} s for {n_edges} edges vs {per_edge_exact:.2f} s per exact edge",
            "verdict": verdict(min(pearson, small_pearson) > 0.8, partly=max(pearson, small_pearson) > 0.8),
            "why": "a first-order estimate; where the effect of an edge is far from linear (a saturated "
            "softmax can switch what a head attends to) it can miss, the motivation for EAP with "
            "integrated gradients (Hanna et al. 2024)",
        },
        {
            "claim": "ACDC finds small faithful circuits, at one forward pass per edge",
            "primer": "Conmy et al. 2023",
            "ours": f"best τ keeps {int(best_acdc['edges kept'])} of {len(small_edges)} edges, recovers "
            f"{best_acdc['recovered']:.0%} ({int(best_acdc['forward passes'])} passes); EAP's top "
            f"{int(best_acdc['edges kept'])}: {eap_at_acdc:.0%}",
            "verdict": verdict(best_acdc["recovered"] > 0.8, partly=best_acdc["recovered"] > 0.5),
        },
    ]
)
claims.fillna("").style.hide(axis="index")

# %%
results = {
    "chapter": "patching",
    "quick": quick,
    "model": model_name,
    "prompts": n_prompts,
    "clean_logit_diff": clean_ld,
    "counterfactual_logit_diff": counter_ld,
    "top_heads": tops,
    "receivers": receivers,
    "eap_pearson_smollm2": pearson,
    "eap_pearson_induction": small_pearson,
    "eap_seconds": eap_seconds,
    "exact_seconds_per_edge": per_edge_exact,
    "faithfulness": faithfulness.to_dict(orient="records"),
    "acdc_vs_eap": comparison.to_dict(orient="records"),
    "claims": claims.to_dict(orient="records"),
    "seconds": time.time() - started,
}
book.save_results(results, rerun={"model_name": model_name, "n_prompts": n_prompts, "seed": seed})
