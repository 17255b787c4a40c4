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
# # Rotations
#
# :::{admonition} What this chapter reproduces, and how to rerun it
# :class: tip
# **Reproduces** the rotation experiments of {cite:t}`elhage2023privileged`: the forward pass
# of a basis-free model is invariant under a rotation of every weight; models trained with a
# shared rotation or independent rotations on every residual read and write learn as well, and
# their residual stream loses its heavy tails while the shared model's computation basis keeps
# them. Then the rotation trick of {cite:t}`ashkboos2024quarot` on the pretrained SmolLM2.
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with its
# training runs and SmolLM2 cached; {glue:text}`rerun_cold` from a cold cache, which trains the
# basis-free, LayerNorm, shared- and independent-rotation models for every seed.
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **The claims.** {cite:t}`elhage2023privileged` argue that nothing in a transformer's forward pass
# prefers the standard basis of the residual stream, once LayerNorm is replaced by a basis-free
# norm ($\mathrm{RMSNorm}(x) = \alpha\, x / \mathrm{RMS}(x)$ with one scalar gain $\alpha$):
#
# 1. multiply every matrix that *reads* the residual stream by a random orthogonal $R$ and every
#    matrix that *writes* it by $R^\top$, and the loss changes only by floating-point noise, far
#    less than the spread between random seeds;
# 2. train with fixed random rotations on every read and write, one *shared* rotation or
#    *independent* ones, and the model learns as well as the baseline;
# 3. in those models the residual stream's kurtosis is about 3, but in the shared-rotation
#    model the *computation basis* (what the MLP reads, after the rotation) is as heavy-tailed
#    as the baseline's residual stream, and the independent-rotation model shows little: the
#    privileged basis is made by the layers' computation, not by the residual stream.
#
# The same trick makes quantisation work on real models (QuaRot {cite:p}`ashkboos2024quarot`,
# SpinQuant {cite:p}`liu2024spinquant`): fold the norms' gains into the next matrices,
# rotate, and the outlier dimensions are gone with the function unchanged. We do that to
# SmolLM2.

# %% tags=["parameters"]
model_name = "smollm2-135m"  # [model] the pretrained model for the QuaRot-style rotation
seeds = (0, 1, 2)  # [non-empty, min 0] training seeds for every trained variant
n_rotations = 5  # [> 0] random rotations of the trained model's weights
n_sequences = 16  # [> 0] held-out sequences for losses and statistics
seed = 0  # [min 0]
quick = False  # a small run for CI

# %% tags=["setup"]
import copy
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown, display

import resid
from resid import book, data, experiments, stats
from resid.book import verdict
from resid.model import fold_norm_gains, rotate_residual
from resid.train import train

warnings.filterwarnings("ignore", message="IProgress not found")
sns.set_theme(style="whitegrid", context="notebook")
started = time.time()
base = experiments.REGIME
if quick:  # a few steps of a tiny model: every code path, none of the conclusions
    base = experiments.quick_config(base)
    seeds, n_rotations, n_sequences = (0, 1), 2, 4


# %%
def trained(name: str, s: int):
    return train(experiments.variant(name, s, base), progress=False)


tokens = experiments.held_out_tokens(base, n_sequences, seed=seed)
print(f"regime: d_model={base.model.d_model}, {base.model.n_layers} layers, {base.optimizer} lr {base.lr}, "
      f"{base.steps} steps of {base.batch_size}x{base.model.n_ctx} byte tokens; seeds {seeds}")  # fmt: skip

# %% [markdown]
# ## 1. The forward pass is rotation-invariant
#
# We take the basis-free model trained with each seed and compare its held-out loss with that of
# copies whose weights are rotated by Haar-random orthogonal matrices, in float32 and in
# float64. The yardstick is how much the loss differs between seeds.

# %%
rows = []
seed_losses = []
for s in seeds:
    model = trained("basisfree", s).model
    loss32 = model.loss(tokens).item()
    seed_losses.append(loss32)
    model64 = copy.deepcopy(model).double()  # .double() and .float() convert in place
    loss64 = model64.loss(tokens).item()
    for r in range(n_rotations):
        rotation = stats.haar_rotation(base.model.d_model, seed=100 + r, dtype=torch.float64)
        rotated64 = rotate_residual(model64, rotation)
        change64 = abs(rotated64.loss(tokens).item() - loss64)
        change32 = abs(rotate_residual(model, rotation).loss(tokens).item() - loss32)
        rows.append({"seed": s, "rotation": r, "float32 |Δloss|": change32, "float64 |Δloss|": change64})
invariance = pd.DataFrame(rows)
seed_spread = float(np.std(seed_losses, ddof=1)) if len(seeds) > 1 else float("nan")

# %% tags=["plot"]
fig, ax = plt.subplots(figsize=(7, 3.4))
melted = invariance.melt(value_vars=["float32 |Δloss|", "float64 |Δloss|"], var_name="precision",
                         value_name="|Δloss|")  # fmt: skip
sns.stripplot(data=melted, x="precision", y="|Δloss|", size=7, ax=ax)
ax.axhline(seed_spread, color="C3", ls="--", label=f"sd of the loss over {len(seeds)} seeds")
ax.set(yscale="log", title="basis-free model: loss change under a rotation of every weight")
ax.legend()
plt.show()

# %%
display(Markdown(
    f"Largest change under rotation: {invariance['float32 |Δloss|'].max():.1e} nats in float32, "
    f"{invariance['float64 |Δloss|'].max():.1e} in float64; the seed-to-seed sd of the loss is "
    f"{seed_spread:.1e} nats, {seed_spread / invariance['float32 |Δloss|'].max():,.0f} times the "
    "float32 change."
))  # fmt: skip

# %% [markdown]
# ### Exercise 4.1: forget one matrix
#
# `rotate_residual` multiplies every matrix that reads the residual stream by $R$ and every one
# that writes it by $R^\top$. Rotate the seed-0 basis-free model in float64, then put back the
# unrotated output matrix of block 0's MLP (`blocks[0].mlp.W_out`), as a bug in a hand-written
# rotation would. **Predict**: does the loss move by float noise, by a little, or by a lot?

# %% tags=["hide-cell", "solution"]
model64 = copy.deepcopy(trained("basisfree", seeds[0]).model).double()
rotation = stats.haar_rotation(base.model.d_model, seed=7, dtype=torch.float64)
with torch.no_grad():
    reference = model64.loss(tokens).item()
    exact = rotate_residual(model64, rotation)
    buggy = rotate_residual(model64, rotation)
    buggy.blocks[0].mlp.W_out.weight.copy_(model64.blocks[0].mlp.W_out.weight)
    exact_change = abs(exact.loss(tokens).item() - reference)
    buggy_change = abs(buggy.loss(tokens).item() - reference)
assert exact_change < 1e-9 and buggy_change > 1e3 * max(exact_change, 1e-15)
print(f"every matrix rotated: |Δloss| {exact_change:.1e}; one writer left out: {buggy_change:.3f} nats. "
      "The MLP's output lands in the old basis, where every later layer reads it as a different "
      "vector.")  # fmt: skip

# %% [markdown]
# ## 2. LayerNorm is not, until it is folded
#
# LayerNorm depends on the basis twice: it subtracts the mean, a dot product with
# $(1, \dots, 1)/d$, and it multiplies by a per-channel gain. Rotating the weights of a trained
# LayerNorm model naively changes its function. Both dependencies can be moved out of the norm
# without changing the function: centre every write to the residual stream (then the mean is
# always 0 and the subtraction does nothing), and multiply each gain into the matrices that
# read the norm's output. What is left is the basis-free norm, and rotation is exact again.

# %%
rows = []
for s in seeds:
    model = trained("layernorm", s).model.double()
    folded = fold_norm_gains(model)
    loss = model.loss(tokens).item()
    for r in range(n_rotations):
        rotation = stats.haar_rotation(base.model.d_model, seed=100 + r, dtype=torch.float64)
        rows.append(
            {
                "seed": s,
                "rotation": r,
                "naive |Δloss|": abs(
                    rotate_residual(model, rotation, strict=False).loss(tokens).item() - loss
                ),
                "folded, not rotated |Δloss|": abs(folded.loss(tokens).item() - loss),
                "folded + rotated |Δloss|": abs(rotate_residual(folded, rotation).loss(tokens).item() - loss),
            }
        )
layernorm_rotation = pd.DataFrame(rows)
layernorm_rotation.groupby("seed").max().drop(columns="rotation").style.format("{:.2e}")

# %% [markdown]
# ## 3. The same on a pretrained model: SmolLM2
#
# SmolLM2 uses RMSNorm with per-channel gains. We fold them, rotate the residual stream by a
# Haar-random $R$, and compare the logits; then look at the residual stream in the new basis.

# %%
smol = resid.load(model_name)
smol_tokens = data.windows(
    data.token_ids(data.corpus("pydoc"), smol.tokenizer), 128, 2 if quick else 8, seed=seed
)
with torch.no_grad():
    folded = fold_norm_gains(smol)
    rotation = stats.haar_rotation(smol.cfg.d_model, seed=seed, dtype=torch.float64)
    rotated = rotate_residual(folded.double(), rotation).float()  # rotate in float64, run in float32
    logits, logits_rotated = smol(smol_tokens), rotated(smol_tokens)
    before = smol.residual_stream(smol_tokens)
    after = rotated.residual_stream(smol_tokens)
difference = (logits - logits_rotated).abs().max().item()
agreement = (logits.argmax(-1) == logits_rotated.argmax(-1)).float().mean().item()
kurt_before = [stats.kurtosis_metric(h) for h in before]
kurt_after = [stats.kurtosis_metric(h) for h in after]
max_before = before.abs().amax(dim=(1, 2)).numpy()
max_after = after.abs().amax(dim=(1, 2)).numpy()

# %% tags=["plot"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
axes[0].plot(kurt_before, marker="o", label="original basis")
axes[0].plot(kurt_after, marker="s", label="folded and rotated")
axes[0].axhline(3, color="grey", ls="--")
axes[0].set(yscale="log", xlabel="layer boundary", ylabel="kurtosis", title="kurtosis per layer")
axes[1].plot(max_before, marker="o", label="original basis")
axes[1].plot(max_after, marker="s", label="folded and rotated")
axes[1].set(yscale="log", xlabel="layer boundary", ylabel="max |x|", title="largest residual entry")
for ax in axes:
    ax.legend()
fig.suptitle(f"{model_name}: the same function in a random basis")
plt.tight_layout()
plt.show()

# %%
display(Markdown(
    f"Largest logit difference {difference:.2e} (logits span ±{logits.abs().max().item():.0f}); the top "
    f"token agrees at {agreement:.2%} of {logits.shape[0] * logits.shape[1]:,} positions. Kurtosis after "
    f"the blocks drops from {min(kurt_before[1:]):.0f}–{max(kurt_before[1:]):.0f} to "
    f"{min(kurt_after[1:]):.2f}–{max(kurt_after[1:]):.2f}; the largest entry from {max_before.max():,.0f} "
    f"to {max_after.max():,.0f}."
))  # fmt: skip

# %% [markdown]
# ### Exercise 4.2: the smallest rotation that matters
#
# A Givens rotation turns only one plane: it mixes two coordinates and leaves the rest alone.
# Build one that mixes, by 45°, the dimension holding SmolLM2's largest residual entry with
# another dimension, apply it to the folded model with `rotate_residual`, and compare the logits
# and the largest entry at that layer. **Predict** both before running.

# %% tags=["hide-cell", "solution"]
peak_layer = int(max_before.argmax())
massive_dim = int(before[peak_layer].abs().amax(dim=0).argmax())
other = (massive_dim + 1) % smol.cfg.d_model
givens = torch.eye(smol.cfg.d_model, dtype=torch.float64)
c = s_ = 2**-0.5  # cos and sin of 45°
givens[massive_dim, massive_dim], givens[massive_dim, other] = c, s_
givens[other, massive_dim], givens[other, other] = -s_, c
with torch.no_grad():
    turned = rotate_residual(folded.double(), givens).float()
    givens_difference = (turned(smol_tokens) - logits).abs().max().item()
    turned_max = turned.residual_stream(smol_tokens)[peak_layer].abs().max().item()
assert torch.allclose(givens @ givens.T, torch.eye(smol.cfg.d_model, dtype=torch.float64))
assert givens_difference < 1e-2 and turned_max < 0.8 * max_before[peak_layer]
print(f"max |Δlogit| {givens_difference:.1e}: the same function. Largest entry at boundary {peak_layer}: "
      f"{max_before[peak_layer]:,.0f} -> {turned_max:,.0f} (about 1/√2: it is now shared by two "
      "coordinates).")  # fmt: skip

# %% [markdown]
# ## 4. Training in rotated bases
#
# Now the rotations are part of the model during training: fixed random matrices on every read
# ($x R$) and write ($y R^\top$) of the residual stream. *Shared*: one rotation everywhere, so
# all layers compute in one basis that differs from the residual stream's. *Independent*: a
# different rotation for every read and write. Same data, steps and seeds as the basis-free
# baseline.

# %%
names = ["basisfree", "shared rotation", "independent rotations"]
curves, finals, analysis = experiments.compare_variants(names, seeds, base, tokens)

# %% tags=["plot"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
sns.lineplot(data=curves, x="step", y="val loss", hue="variant", errorbar="sd", ax=axes[0])
axes[0].set(title="held-out loss (mean ± sd over seeds)")
long = analysis[analysis.layer > 0].melt(id_vars=["variant", "seed", "layer"],
                                         value_vars=["kurtosis", "mlp-in kurtosis"],
                                         var_name="basis", value_name="value")  # fmt: skip
long["basis"] = long["basis"].map(
    {"kurtosis": "residual stream", "mlp-in kurtosis": "computation (MLP input)"}
)
sns.barplot(data=long, x="variant", y="value", hue="basis", errorbar="sd", ax=axes[1])
axes[1].axhline(3, color="grey", ls="--")
axes[1].set(title="kurtosis after the blocks (mean over layers and seeds)", ylabel="kurtosis", xlabel="")
plt.tight_layout()
plt.show()

# %%
summary = finals.groupby("variant")["val loss"].agg(["mean", "std"]).loc[names]
display(summary.style.format("{:.4f}"))

# %% [markdown]
# ### Exercise 4.3: where the computation basis lives
#
# In the shared-rotation model each MLP reads $\mathrm{norm}(x) R$, where $x$ is the residual
# stream after attention (`blocks.{i}.hook_resid_mid`) and $R$ is the block's buffer `R_mlp_in`.
# **Predict**: the kurtosis of what the MLP reads (`blocks.{i}.hook_mlp_in`) equals the kurtosis
# of which tensor you can build from the residual stream alone? Check it with
# `model.run_with_cache` for every block.

# %% tags=["hide-cell", "solution"]
shared = trained("shared rotation", seeds[0]).model
hooks = [f"blocks.{i}.hook_{p}" for i in range(base.model.n_layers) for p in ("resid_mid", "mlp_in")]
_, cache = shared.run_with_cache(tokens, hooks)
rows = []
for i, block in enumerate(shared.blocks):
    mid, mlp_in = cache.get(f"blocks.{i}.hook_resid_mid"), cache.get(f"blocks.{i}.hook_mlp_in")
    # the basis-free norm scales each token by one number, which kurtosis ignores: only R matters
    rows.append({"block": i, "residual": stats.kurtosis_metric(mid),
                 "residual @ R_mlp_in": stats.kurtosis_metric(mid @ block.R_mlp_in),
                 "MLP input": stats.kurtosis_metric(mlp_in)})  # fmt: skip
computation_basis = pd.DataFrame(rows).set_index("block")
gap = (computation_basis["residual @ R_mlp_in"] - computation_basis["MLP input"]).abs()
assert (gap < 1e-3 * computation_basis["MLP input"]).all()
computation_basis.style.format("{:.3f}")

# %% [markdown]
# (claims-rotations)=
# ## The paper's claims beside ours

# %%
base_loss = summary.loc["basisfree", "mean"]
noise = summary["std"].max()
by_variant = (
    analysis[analysis.layer > 0].groupby("variant")[["kurtosis", "mlp-in kurtosis", "rotated mean"]].mean()
)


claims = pd.DataFrame([
    {"claim": "rotating every weight changes the loss only by float noise",
     "paper": "tiny vs seed noise (test loss ≈ 3.02 nats)",
     "ours": f"max {invariance['float32 |Δloss|'].max():.1e} (float32) vs seed sd {seed_spread:.1e}",
     "verdict": verdict(invariance["float32 |Δloss|"].max() < 0.01 * seed_spread)},
    {"claim": "LayerNorm breaks the invariance; folding restores it",
     "paper": "LayerNorm is basis-dependent (mean, per-channel gain)",
     "ours": f"naive {layernorm_rotation['naive |Δloss|'].max():.2e}, folded "
             f"{layernorm_rotation['folded + rotated |Δloss|'].max():.1e}",
     "verdict": verdict(layernorm_rotation["naive |Δloss|"].min()
                        > 10 * layernorm_rotation["folded + rotated |Δloss|"].max())},
    {"claim": "models trained with rotations learn as well as the baseline",
     "paper": "loss curves converge within noise after ~1B tokens",
     "ours": "; ".join(f"{v}: {summary.loc[v, 'mean'] - base_loss:+.3f}" for v in names[1:])
             + f" nats vs basis-free (seed sd up to {noise:.3f})",
     "verdict": verdict(all(abs(summary.loc[v, "mean"] - base_loss) < 3 * noise for v in names[1:]),
                        partly=any(abs(summary.loc[v, "mean"] - base_loss) < 3 * noise for v in names[1:]))},
    {"claim": "with rotations the residual stream's kurtosis is ≈ 3",
     "paper": "both rotated models ≈ 3",
     "ours": ", ".join(f"{v}: {by_variant.loc[v, 'kurtosis']:.2f}" for v in names[1:]),
     "verdict": verdict(all(abs(by_variant.loc[v, "kurtosis"] - by_variant.loc[v, "rotated mean"]) < 0.5
                            for v in names[1:]))},
    {"claim": "the shared rotation's computation basis is as heavy-tailed as the baseline",
     "paper": "similar to the baseline",
     "ours": f"shared MLP input {by_variant.loc['shared rotation', 'mlp-in kurtosis']:.2f} vs basis-free "
             f"residual {by_variant.loc['basisfree', 'kurtosis']:.2f}",
     "verdict": verdict(by_variant.loc["shared rotation", "mlp-in kurtosis"]
                        > 0.7 * by_variant.loc["basisfree", "kurtosis"]
                        and by_variant.loc["basisfree", "kurtosis"]
                        > by_variant.loc["basisfree", "rotated mean"] + 0.5,
                        partly=by_variant.loc["shared rotation", "mlp-in kurtosis"]
                        > by_variant.loc["shared rotation", "rotated mean"] + 0.5)},
    {"claim": "independent rotations show only small tails",
     "paper": "weak effect, mostly early layers",
     "ours": f"MLP input {by_variant.loc['independent rotations', 'mlp-in kurtosis']:.2f}",
     "verdict": verdict(by_variant.loc["independent rotations", "mlp-in kurtosis"]
                        < by_variant.loc["shared rotation", "mlp-in kurtosis"])},
    {"claim": "QuaRot: folded and rotated SmolLM2 computes the same logits, kurtosis ≈ 3",
     "paper": "(QuaRot/SpinQuant; the paper's argument applied to a real model)",
     "ours": f"max |Δlogit| {difference:.1e}, top-1 agreement {agreement:.2%}, kurtosis "
             f"{min(kurt_after[1:]):.2f}–{max(kurt_after[1:]):.2f}",
     "verdict": verdict(agreement > 0.99 and max(kurt_after[1:]) < 3.5)},
])  # fmt: skip
claims.style.hide(axis="index")

# %%
results = {
    "chapter": "rotations",
    "regime": base.key(),
    "seeds": list(seeds),
    "quick": quick,
    "max_rotation_loss_change_float32": float(invariance["float32 |Δloss|"].max()),
    "max_rotation_loss_change_float64": float(invariance["float64 |Δloss|"].max()),
    "seed_loss_sd": seed_spread,
    "smollm2_max_logit_difference": difference,
    "smollm2_top1_agreement": agreement,
    "smollm2_kurtosis_before": kurt_before,
    "smollm2_kurtosis_after": kurt_after,
    "final_val_loss": summary.to_dict(),
    "claims": claims.to_dict(orient="records"),
    "seconds": time.time() - started,
}
book.save_results(
    results, rerun={"model_name": model_name, "seeds": seeds, "n_sequences": n_sequences, "seed": seed}
)
