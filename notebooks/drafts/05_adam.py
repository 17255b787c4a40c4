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
# **The claim.** Having ruled out LayerNorm and floating point, Elhage et al. (2023) point at
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
# eigenbasis of a Shampoo preconditioner), which He et al. (2024) found to reduce outlier
# features.
#
# **The experiment.** The basis-free model of the RMSNorm chapter (so that no norm prefers a
# basis either), trained from the same regime with each optimiser.

# %% tags=["parameters"]
model_name = "regime"  # the chapter trains its own models; see resid.experiments
seeds = (0, 1, 2)  # AdamW, the reference
followup_seeds = (0, 1, 2)  # SGD, rotated AdamW, Muon, SOAP
sgd_learning_rates = (0.3, 1.0, 3.0)  # the SGD sweep (momentum 0.9, no weight decay)
sgd_sweep_steps = 600
n_sequences = 16
seed = 0
quick = False  # a small run for CI

# %%
import time
import warnings
from dataclasses import replace
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from IPython.display import Markdown, display

from resid import book, experiments
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
# ## Tuning SGD
#
# SGD has no per-coordinate scale, so its learning rate must be far larger than Adam's. A short
# sweep on the basis-free model picks it; PyTorch's SGD couples weight decay to the gradient, so
# we train without it.

# %%
sweep_rows = []
for lr in sgd_learning_rates:
    # same configuration as the comparison below, so the best learning rate's run is reused there
    cfg = replace(experiments.variant("sgd", 0, base), lr=lr, steps=sgd_sweep_steps)
    history = train(cfg, progress=False).history
    final = [h for h in history if "val_loss" in h][-1]["val_loss"]
    sweep_rows.append({"lr": lr, "val loss": final if np.isfinite(final) else np.nan})
sgd_sweep = pd.DataFrame(sweep_rows)
best_lr = float(sgd_sweep.loc[sgd_sweep["val loss"].idxmin(), "lr"])
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(sgd_sweep["lr"], sgd_sweep["val loss"], marker="o")
ax.set(xscale="log", xlabel="SGD learning rate", ylabel="held-out loss",
       title=f"SGD sweep, {sgd_sweep_steps} steps (best lr {best_lr:g})")  # fmt: skip
plt.show()

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
fig, axes = plt.subplots(1, 3, figsize=(17, 4))
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
# ## The paper's hypothesis, tested

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
book.save_results(results)
