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
# # Is it Adam?
#
# :::{admonition} What this chapter reproduces, and how to rerun it
# :class: tip
# **Runs** the two experiments {cite:t}`elhage2023privileged` proposed and did not run (training
# with SGD, and with Adam {cite:p}`kingma2015adam,loshchilov2019adamw` whose moments live in a
# rotated basis), and two optimisers with non-diagonal preconditioning, Muon
# {cite:p}`jordan2024muon` and SOAP {cite:p}`vyas2024soap`, on the basis-free model of the
# RMSNorm chapter (AdamW with the seeds of `seeds`, the other optimisers with `followup_seeds`).
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with its
# training runs cached; {glue:text}`rerun_cold` from a cold cache, which trains the SGD sweep
# and every optimiser and seed. Where the training runs were trained: {glue:text}`trained_on`.
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **The claim.** Having ruled out LayerNorm and floating point, {cite:t}`elhage2023privileged` point at
# the one remaining basis-dependent part of training: Adam divides each parameter's update by a
# running estimate of that coordinate's own gradient scale, so it treats the basis its weights
# are stored in differently from any other. They proposed two experiments and ran neither:
#
# 1. train with a basis-free optimiser, plain SGD with momentum, hard to tune but possible for a
#    small model;
# 2. train with Adam whose moments live in a different basis from the weights: gradients rotated
#    into a fixed random basis, Adam applied there, the update rotated back.
#
# If Adam's normaliser picks the basis, (1) should show no privileged basis, and (2) should move
# it away from the standard basis. We run both, and two modern optimisers with non-diagonal
# preconditioning: **Muon** (orthogonalised momentum for the hidden matrices; its update is
# equivariant to rotations of a matrix's input and output spaces) and **SOAP** (Adam run in the
# eigenbasis of a Shampoo preconditioner {cite:p}`gupta2018shampoo`), which
# {cite:t}`he2024outliers` found to reduce outlier features.
#
# **The experiment.** The basis-free model of the RMSNorm chapter (so that no norm prefers a
# basis either), trained from the same regime with each optimiser.

# %% tags=["parameters"]
model_name = "regime"  # [one of regime] the chapter trains its own models; see resid.experiments
seeds = (0, 1, 2)  # [non-empty, min 0] AdamW, the reference
followup_seeds = (0, 1)  # [non-empty, min 0] SGD, rotated AdamW, Muon, SOAP
sgd_learning_rates = (0.03, 0.1, 0.3, 1.0)  # [non-empty, > 0] the SGD sweep (momentum 0.9, no decay)
sgd_sweep_steps = 600  # [> 0]
n_sequences = 16  # [> 0] held-out sequences for losses and statistics
seed = 0  # [min 0]
quick = False  # a small run for CI

# %% tags=["setup"]
import time
import warnings
from dataclasses import replace
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown, display

from resid import book, experiments, progress, stats
from resid.optim import RotatedAdamW
from resid.train import train

warnings.filterwarnings("ignore", message="IProgress not found")
sns.set_theme(style="whitegrid", context="notebook")
started = time.time()
base = experiments.REGIME
if quick:  # every code path on a tiny model, none of the conclusions
    base = experiments.quick_config(base)
    seeds, n_sequences, sgd_learning_rates, sgd_sweep_steps = (0, 1), 4, (0.3, 1.0), 40
tokens = experiments.held_out_tokens(base, n_sequences, seed=seed)

# %% [markdown]
# ## Where an optimiser could pick the basis
#
# Before training anything: an optimiser can only prefer the standard basis if its step on a
# rotated problem differs from the rotated step on the original one. The two exercises below
# check which of ours do, and what Adam's step looks like.
#
# ### Exercise 5.1: which optimisers commute with a rotation?
#
# Rotate a problem: replace a weight matrix $W$ by $P^\top W Q$ and its gradient $G$ by
# $P^\top G Q$, for random rotations $P$, $Q$. An optimiser that does not care about the basis
# takes the rotated step: its result is $P^\top W_\text{new} Q$. **Predict** which of SGD with
# momentum, AdamW, Muon (`torch.optim.Muon`) and our `RotatedAdamW` do, then check three steps
# of each on a $64 \times 32$ matrix with a fixed gradient.

# %% tags=["hide-cell", "solution"]
def steps(make, w: torch.Tensor, g: torch.Tensor, n: int = 3) -> torch.Tensor:
    p = torch.nn.Parameter(w.clone())
    optimiser = make([p])
    for _ in range(n):
        p.grad = g.clone()
        optimiser.step()
    return p.detach()


gen = torch.Generator().manual_seed(seed)
W, G = torch.randn(64, 32, generator=gen), torch.randn(64, 32, generator=gen)
P, Q = stats.haar_rotation(64, seed=seed + 1), stats.haar_rotation(32, seed=seed + 2)
makers = {
    "SGD, momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.0),
    "Muon": lambda ps: torch.optim.Muon(ps, lr=0.01, adjust_lr_fn="match_rms_adamw"),
    "RotatedAdamW": lambda ps: RotatedAdamW(ps, lr=0.01, weight_decay=0.0, seed=seed),
}
relative_gap = {}
for name, make in makers.items():
    plain, rotated = steps(make, W, G), steps(make, P.T @ W @ Q, P.T @ G @ Q)
    relative_gap[name] = ((P.T @ plain @ Q - rotated).abs().max() / (plain - W).abs().max()).item()
# Muon orthogonalises with a Newton-Schulz iteration in bfloat16: equivariant up to its rounding
assert relative_gap["SGD, momentum"] < 1e-4 and relative_gap["Muon"] < 0.05
assert relative_gap["AdamW"] > 0.5 and relative_gap["RotatedAdamW"] > 0.5
gaps = pd.Series(relative_gap, name="|rotated step − rotation of the step| / |step|").to_frame()
gaps.style.format("{:.1e}")

# %% [markdown]
# RotatedAdamW is no more rotation-equivariant than AdamW: it normalises per coordinate too,
# only in a fixed random basis of its own. That is the paper's test: if Adam's normaliser picks
# the basis, this optimiser should pick *its* basis, not the standard one.
#
# ### Exercise 5.2: Adam's first step
#
# **Predict** AdamW's first update of a parameter with gradient $G$ (bias-corrected moments,
# tiny $\epsilon$, no weight decay), then check it. What does that update do to a gradient that
# points along a random direction rather than a coordinate axis? Finally, check that
# `RotatedAdamW(identity=True)` takes exactly AdamW's steps.

# %% tags=["hide-cell", "solution"]
first = steps(lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.0), W, G, n=1)
assert torch.allclose(first - W, -0.01 * G.sign(), atol=1e-6)
same = steps(lambda ps: RotatedAdamW(ps, lr=0.01, identity=True), W, G)
assert torch.allclose(same, steps(lambda ps: torch.optim.AdamW(ps, lr=0.01), W, G), atol=1e-6)
cosine = (G.sign().flatten() @ G.flatten() / (G.numel() ** 0.5 * G.norm())).item()
print(f"first step = -lr·sign(G): every coordinate moves by the same amount, whatever its gradient. Its "
      f"cosine with the gradient is {cosine:.2f} (√(2/π) ≈ 0.80 for a Gaussian gradient): the step "
      "points at a corner of the cube around W, a direction set by the coordinate axes.")  # fmt: skip


# %% [markdown]
# ## Tuning SGD
#
# SGD has no per-coordinate scale, so its learning rate must be far larger than Adam's. A short
# sweep on the basis-free model picks it; PyTorch's SGD couples weight decay to the gradient, so
# we train without it.

# %%
sweep_rows = []
for lr in progress.track(sgd_learning_rates, "SGD learning rate"):
    # same configuration as the comparison below, so the best learning rate's run is reused there
    cfg = replace(experiments.variant("sgd", 0, base), lr=lr, steps=sgd_sweep_steps)
    history = train(cfg, progress=False).history
    final = [h for h in history if "val_loss" in h][-1]["val_loss"]
    sweep_rows.append({"lr": lr, "val loss": final if np.isfinite(final) else np.nan})
sgd_sweep = pd.DataFrame(sweep_rows)
best_lr = float(sgd_sweep.loc[sgd_sweep["val loss"].idxmin(), "lr"])

# %% tags=["plot"]
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(sgd_sweep["lr"], sgd_sweep["val loss"], marker="o")
ax.set(xscale="log", xlabel="SGD learning rate", ylabel="held-out loss",
       title=f"SGD sweep, {sgd_sweep_steps} steps (best lr {best_lr:g})")  # fmt: skip
plt.show()

# %%
at_edge = best_lr in (min(sgd_learning_rates), max(sgd_learning_rates))
edge_note = ", inside the sweep."
if at_edge:
    edge_note = (", at the edge of the sweep: a wider sweep might find a better one, so SGD's loss below "
                 "is an upper bound on what it can reach in this budget.")
display(Markdown(f"The best of {len(sgd_learning_rates)} learning rates is {best_lr:g}{edge_note}"))

# %% [markdown]
# ## Five optimisers, same model, same data

# %%
names = ["basisfree", "sgd", "rotated adam", "muon", "soap"]
labels = {"basisfree": "AdamW", "sgd": f"SGD (lr {best_lr:g})", "rotated adam": "AdamW, rotated moments",
          "muon": "Muon + AdamW", "soap": "SOAP"}  # fmt: skip
sgd_base = replace(base, lr=best_lr)
frames = [experiments.compare_variants([n], seeds if n == "basisfree" else followup_seeds,
                                       sgd_base if n == "sgd" else base, tokens) for n in names]  # fmt: skip
curves, finals, analysis = (pd.concat([f[i] for f in frames], ignore_index=True) for i in range(3))
for frame in (curves, finals, analysis):
    frame["optimiser"] = frame["variant"].map(labels)
order = [labels[n] for n in names]

# %% tags=["plot"]
fig, axes = plt.subplots(1, 3, figsize=(10, 3.6))
sns.lineplot(
    data=curves, x="step", y="max kurtosis", hue="optimiser", hue_order=order, errorbar="sd", ax=axes[0]
)
axes[0].axhline(3, color="grey", ls="--")
axes[0].set(title="most extreme layer's kurtosis during training")
sns.lineplot(data=curves, x="step", y="val loss", hue="optimiser", hue_order=order, errorbar="sd", ax=axes[1],
             legend=False)  # fmt: skip
axes[1].set(title="held-out loss", ylabel="nats per byte")
sns.scatterplot(data=curves, x="val loss", y="max kurtosis", hue="optimiser", hue_order=order, ax=axes[2],
                legend=False, alpha=0.6)  # fmt: skip
axes[2].axhline(3, color="grey", ls="--")
axes[2].set(title="kurtosis against loss (every evaluation)", xlim=(None, curves["val loss"].quantile(0.9)))
plt.tight_layout()
plt.show()

# %% [markdown]
# The right panel matters: an optimiser that learns less might also grow less structure. Read
# it at equal loss. The table compares each optimiser's kurtosis at the first evaluation where
# its loss reaches the worst optimiser's final loss.

# %%
target = finals.groupby("optimiser")["val loss"].mean().max()
at_target = (curves[curves["val loss"] <= target + 1e-9].sort_values("step").groupby(["optimiser", "seed"])
             .first().groupby("optimiser")["max kurtosis"].mean())  # fmt: skip
after_blocks = analysis[analysis.layer > 0]
per_run = after_blocks.groupby(["optimiser", "seed"])[
    ["kurtosis", "rotated mean", "top-4 energy share"]
].max()
table = per_run.groupby("optimiser").mean().loc[order]
table["kurtosis at equal loss"] = at_target.reindex(order)
table["final val loss"] = finals.groupby("optimiser")["val loss"].mean().loc[order]
table["val loss sd"] = finals.groupby("optimiser")["val loss"].std().loc[order]
display(table.style.format("{:.3f}"))
display(Markdown(f"Equal-loss target: {target:.3f} nats per byte (the worst optimiser's final loss)."))

# %% [markdown]
# ### Exercise 5.3: where the energy sits
#
# The table's "top-4 energy share" is the fraction of the residual stream's squared norm
# (summed over tokens) held by its four heaviest coordinates; $4/d$ for a basis-free
# representation. Compute it yourself for the last layer boundary of the seed-0 AdamW and SGD
# models (`model.residual_stream(tokens)[-1]`), check it against `resid.stats.top_energy_share`,
# and **predict** first which of the two is further above $4/d$.

# %% tags=["hide-cell", "solution"]
def top4_share(acts: torch.Tensor) -> float:
    energy = acts.double().pow(2).sum(0)  # per coordinate, over tokens
    return (energy.topk(4).values.sum() / energy.sum()).item()


shares = {}
for name, cfg in (("AdamW", experiments.variant("basisfree", seeds[0], base)),
                  ("SGD", experiments.variant("sgd", followup_seeds[0], sgd_base))):  # fmt: skip
    last = train(cfg, progress=False).model.residual_stream(tokens)[-1]
    shares[name] = top4_share(last)
    assert abs(shares[name] - stats.top_energy_share(last, 4)) < 1e-4
print(f"top-4 energy share at the last boundary: AdamW {shares['AdamW']:.3f}, SGD {shares['SGD']:.3f}; "
      f"4/d = {4 / base.model.d_model:.3f}")  # fmt: skip

# %%
adam = table.loc[labels["basisfree"]]


def excess(name: str, column: str = "kurtosis") -> float:
    """How far above its own rotated control an optimiser's kurtosis sits."""
    return float(table.loc[labels[name], column] - table.loc[labels[name], "rotated mean"])


verdict = partial(book.verdict, prediction=True)
adam_excess = excess("basisfree")
claims = pd.DataFrame([
    {"prediction": "AdamW grows a privileged basis (the baseline)", "source": "paper",
     "ours": f"kurtosis {adam['kurtosis']:.2f} vs rotated {adam['rotated mean']:.2f}",
     "verdict": verdict(adam_excess > 1, partly=adam_excess > 0.3)},
    {"prediction": "SGD grows none", "source": "paper's proposed follow-up (not run there)",
     "ours": f"excess kurtosis {excess('sgd'):.2f} vs AdamW {adam_excess:.2f}; at equal loss "
             f"{table.loc[labels['sgd'], 'kurtosis at equal loss']:.2f} vs "
             f"{adam['kurtosis at equal loss']:.2f}",
     "verdict": verdict(excess("sgd") < 0.25 * adam_excess, partly=excess("sgd") < 0.75 * adam_excess)},
    {"prediction": "Adam with rotated moments grows none in the standard basis",
     "source": "paper's proposed follow-up (not run there)",
     "ours": f"excess kurtosis {excess('rotated adam'):.2f} vs AdamW {adam_excess:.2f}",
     "verdict": verdict(excess("rotated adam") < 0.25 * adam_excess,
                        partly=excess("rotated adam") < 0.75 * adam_excess)},
    {"prediction": "Muon (rotation-equivariant updates) grows none", "source": "ours, from the hypothesis",
     "ours": f"excess kurtosis {excess('muon'):.2f}",
     "verdict": verdict(excess("muon") < 0.25 * adam_excess, partly=excess("muon") < 0.75 * adam_excess)},
    {"prediction": "SOAP reduces outlier features", "source": "He et al. (2024)",
     "ours": f"excess kurtosis {excess('soap'):.2f}",
     "verdict": verdict(excess("soap") < 0.5 * adam_excess, partly=excess("soap") < adam_excess)},
])  # fmt: skip
supported = claims.loc[claims["verdict"] == "supported", "prediction"].tolist()
display(Markdown(
    f"**Takeaways.** With AdamW the basis-free model's most extreme layer reaches a kurtosis of "
    f"{adam['kurtosis']:.1f} against {adam['rotated mean']:.2f} rotated: {adam_excess:.1f} above its "
    f"control. The same model and data with SGD: {excess('sgd'):.1f} above (held-out loss "
    f"{table.loc[labels['sgd'], 'final val loss']:.3f} vs {adam['final val loss']:.3f} nats per byte; at "
    f"equal loss the kurtosis is {table.loc[labels['sgd'], 'kurtosis at equal loss']:.1f} vs "
    f"{adam['kurtosis at equal loss']:.1f}); AdamW with its moments in a rotated basis: "
    f"{excess('rotated adam'):.1f}; Muon: {excess('muon'):.1f}; SOAP: {excess('soap'):.1f}. "
    + (f"Supported here: {'; '.join(supported)}. " if supported else "No prediction is supported here. ")
    + f"Muon's excess ({excess('muon'):.2f}) is the largest of the four and sits "
    f"{0.25 * adam_excess - excess('muon'):+.2f} from the threshold for 'supported' (a quarter of "
    "AdamW's excess). As Muon is normally run, and here, AdamW still trains the embedding and "
    "unembedding, which write into and read from the residual stream directly: a per-coordinate "
    "normaliser is left in the model. "
    + "The verdicts compare each optimiser's excess kurtosis with AdamW's, mean over seeds; the table "
    "below gives them with the thresholds in the code above."))  # fmt: skip

# %% [markdown]
# (claims-adam)=
# ## The paper's hypothesis, tested

# %%
claims.style.hide(axis="index")

# %%
results = {
    "chapter": "adam",
    "quick": quick,
    "regime": base.key(),
    "seeds": list(seeds),
    "sgd_sweep": sgd_sweep.to_dict(orient="records"),
    "sgd_lr": best_lr,
    "table": table.reset_index().to_dict(orient="records"),
    "claims": claims.to_dict(orient="records"),
    "seconds": time.time() - started,
}
rerun = {"seeds": seeds, "followup_seeds": followup_seeds, "sgd_learning_rates": sgd_learning_rates,
         "seed": seed}  # fmt: skip
book.save_results(results, rerun=rerun)
