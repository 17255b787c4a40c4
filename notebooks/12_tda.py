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
# # Training data attribution, checked by retraining
#
# :::{admonition} What this chapter found, and how to rerun it
# :class: tip
# **Result:** {glue:md}`chapter_result`
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with every
# retrained model's losses read from its run record (committed in `book/runs`, one per
# retraining; the full model of each seed, which the attributions need whole, trains again in
# seconds); {glue:text}`rerun_cold` training every model again (`RETRAIN=1`).
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **This chapter reproduces** the training data attribution methods of {cite:t}`ferrando2024primer` (section
# 3.1): TracIn {cite:p}`pruthi2020tracin` and influence functions {cite:p}`koh2017influence`,
# on small byte-level models the book trains itself, where what an attribution predicts can be
# checked by training again without the windows it names. Each claim is judged against a
# criterion in `notebooks/criteria/tda.toml`, committed before the chapter first ran, with an
# interval over test windows (averaged over model seeds) or over planted-string prompts.
#
# **The question.** A language model predicts a continuation: which of its training examples
# does that prediction rest on? *Training data attribution* answers with one score per training
# example. Two families are in the Primer:
#
# - **TracIn** replays training. Each step on a training window $z$ moves the weights by
#   $-\eta\,\nabla L(z)$, which changes a test window's loss by about
#   $-\eta\,\nabla L(z_\text{test})\cdot\nabla L(z)$. Adding that up over checkpoints,
#   $$\text{TracIn}(z, z_\text{test}) = \sum_c \eta_c\,
#   \nabla L(z_\text{test}; \theta_c)\cdot\nabla L(z; \theta_c),$$
#   positive for a window whose steps lowered the test loss: a *proponent*. The account is
#   first-order exact for plain gradient descent; these models train with AdamW, which rescales
#   each parameter's step, so here (as in most uses) it is an approximation.
# - **Influence functions** ask what removing $z$ and training to convergence would do. To first
#   order the test loss rises by
#   $\frac1n\nabla L(z_\text{test})^\top H^{-1}\nabla L(z)$, with $H$ the curvature of the
#   training loss. Large models need an approximation of $H^{-1}$ (EK-FAC in
#   {cite:t}`grosse2023influence`); a model of a hundred thousand parameters trained on a
#   thousand windows does not: we use the Gauss-Newton curvature, estimated from one gradient
#   per training window with targets sampled from the model (the Fisher), damped, and inverted
#   exactly (`resid.tda.influence`).
#
# Neither is the ground truth. The ground truth is retraining, and these models train in
# seconds, so we retrain: for each test window, remove the $k$ training windows a method calls
# the strongest proponents, train again from the same seed on the same batches in the same
# order (the removed windows skipped), and measure how much the test loss rose, against
# removing $k$ random windows. And a planted artefact gives a known answer: a rare string
# written into a few training windows, which a prompt ending in that string can only have
# learned from them.

# %% tags=["parameters"]
model_name = "tda-byte"  # [one of tda-byte] the chapter trains its own models (resid.tda)
n_train = 512  # [> 15] training windows of 64 bytes (65 with the last target)
n_test = 16  # [> 2] held-out test windows, each with its own removal
n_planted = 8  # [> 0] training windows that carry the planted string
n_artefact = 8  # [> 2] held-out prompts that end with the planted string
k_removed = 16  # [> 0] training windows removed for each test window
seeds = (0, 1, 2)  # [non-empty, min 0] model seeds: initialisation and batch order
epochs = 20  # [> 0] passes over the training windows
n_resamples = 2000  # [> 99] bootstrap resamples
seed = 0  # [min 0] which windows are read, and which carry the artefact
quick = False  # a small run for CI

# %% tags=["setup"]
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown, display

from resid import book, data, exercises, stats, tda
from resid.model import Config, Transformer
from resid.progress import steps as progress_steps

ledger = book.start_chapter("tda", seed)  # criteria, claims and checks; theme and seed
if quick:
    n_train, n_test, n_planted, n_artefact, k_removed, seeds, epochs, n_resamples = (
        64, 3, 4, 3, 8, (0,), 3, 200)  # fmt: skip
ARTEFACT = b"@zorblax=quux^plover"  # 20 bytes that the documentation never contains
MODEL = Config(vocab_size=256, n_ctx=64, d_model=64, n_layers=2, n_heads=4, d_mlp=256)

# %% [markdown]
# ## The data, the artefact and the model
#
# The training set is `n_train` windows of 65 bytes of the Python documentation (the book's
# `pydoc` corpus, its first 95%); the test windows come from the held-out last 5%. The artefact
# is written into `n_planted` training windows at random offsets; the artefact prompts are
# held-out windows whose last 20 bytes are the artefact, and their loss is read on its last 19
# bytes (after the first, which nothing predicts). The model is two blocks of width 64
# (about 0.1M parameters), trained with AdamW for `epochs` passes.

# %%
text_ids = data.token_ids(data.corpus("pydoc"), data.ByteTokenizer())
train_ids, held_out_ids = data.train_val_split(text_ids)
clean_train = data.windows(train_ids, MODEL.n_ctx + 1, n_train, seed=seed)
planted_order = torch.randperm(n_train, generator=torch.Generator().manual_seed(seed + 1))
planted_rows = planted_order[:n_planted].sort().values
train = tda.plant(clean_train, ARTEFACT, planted_rows.tolist(), seed=seed + 2)
held_out = data.windows(held_out_ids, MODEL.n_ctx + 1, n_test + n_artefact, seed=seed)
test = held_out[:n_test]
artefact_prompts = tda.plant(
    held_out[n_test:], ARTEFACT, range(n_artefact), at=MODEL.n_ctx + 1 - len(ARTEFACT)
)
continuation = len(ARTEFACT) - 1  # the artefact prompts' loss: the artefact's bytes after its first
ledger.check(
    "the artefact is in exactly the planted training windows, and in no clean one",
    all(ARTEFACT in bytes(row.tolist()) for row in train[planted_rows])
    and sum(ARTEFACT in bytes(row.tolist()) for row in train) == n_planted
    and ARTEFACT.decode() not in data.corpus("pydoc"),
    f"{n_planted} of {n_train} windows",
)  # fmt: skip
schedules = {s: tda.Schedule(MODEL, epochs=epochs, seed=s, checkpoint_epochs=tuple(
    sorted({max(1, round(epochs * f)) for f in (0.25, 0.5, 0.75, 1.0)}))) for s in seeds}  # fmt: skip
print(f"{n_train} training windows ({n_planted} with the artefact), {n_test} test windows, "
      f"{n_artefact} artefact prompts; {sum(p.numel() for p in Transformer(MODEL).parameters()):,} "
      f"parameters, {epochs} epochs of {-(-n_train // 32)} steps")  # fmt: skip

# %% [markdown]
# ## Train, attribute, retrain
#
# For every seed: train on all windows, score every training window for every test window and
# artefact prompt with both methods, then retrain once per test window and method without its
# `k_removed` strongest proponents, and once more without as many random windows. The planted
# windows are removed too, all at once, as a positive control: if retraining without them does
# not raise the artefact prompts' loss, nothing here can be measured by retraining.

# %%
queries = torch.cat([test, artefact_prompts])
runs = []  # one row per (seed, test window, removal)
recalls = []  # one row per (seed, artefact prompt, method)
score_tables = {}
control_rows = []
jobs = [(s, kind, i) for s in seeds for kind in ("TracIn", "influence", "random") for i in range(n_test)]
per_seed = {}
for s in seeds:
    full = tda.train_windows(train, schedules[s])
    test_loss = tda.window_loss(full.model, test)
    # the test windows' scores over their whole loss; the artefact prompts' over the continuation
    scores = {
        "TracIn": torch.cat([
            tda.tracin(full, train, test),
            tda.tracin(full, train, artefact_prompts, continuation),
        ]),
        "influence": torch.cat([
            tda.influence(full.model, train, test, seed=s),
            tda.influence(full.model, train, artefact_prompts, continuation, seed=s),
        ]),
    }  # fmt: skip
    score_tables[s] = scores
    per_seed[s] = {"full": full, "test loss": test_loss}
    for method, table in scores.items():
        for prompt, recall in enumerate(tda.planted_recall(table[n_test:], planted_rows.tolist()).tolist()):
            recalls.append({"seed": s, "prompt": prompt, "method": method, "recall": recall})
    artefact_loss = tda.window_loss(full.model, artefact_prompts, continuation)
    random_planted = torch.randperm(n_train, generator=torch.Generator().manual_seed(100 + s))[:n_planted]
    for removal, removed in (
        ("the planted windows", planted_rows),
        ("as many random windows", random_planted),
    ):
        rise = tda.removal_effect(
            train, schedules[s], removed.tolist(), artefact_prompts, continuation, artefact_loss
        )
        control_rows += [
            {"seed": s, "prompt": p, "removed": removal, "loss rise": r} for p, r in enumerate(rise.tolist())
        ]

for s, kind, i in progress_steps(jobs, "retraining (seed, removal, test window)"):
    if kind == "random":
        removed = torch.randperm(n_train, generator=torch.Generator().manual_seed(10_000 * s + i))[:k_removed]
    else:
        removed = tda.top_helpers(score_tables[s][kind][i : i + 1], k_removed)[0]
    rise = tda.removal_effect(train, schedules[s], removed.tolist(), test[i : i + 1],
                              reference=per_seed[s]["test loss"][i : i + 1])  # fmt: skip
    predicted = score_tables[s]["influence"][i, removed].sum().item() / n_train
    runs.append({"seed": s, "test window": i, "removal": kind, "loss rise": rise.item(),
                 "influence's prediction": predicted})  # fmt: skip
runs, recalls, controls = pd.DataFrame(runs), pd.DataFrame(recalls), pd.DataFrame(control_rows)
print(f"{len(runs) + 2 * len(seeds) + len(seeds)} models trained or read from their records in "
      f"{time.time() - ledger.started:.0f} s")  # fmt: skip

# %% [markdown]
# ### Exercise 12.1: TracIn at one checkpoint, by hand
#
# *Coding · difficulty 1 of 3 · about 15 minutes*
#
# Write `tracin_step(model, lr, train, test)`: for every test window and training window (each
# `[n, 65]` byte tokens), the learning rate times the dot product of the two windows' loss
# gradients, every parameter flattened into one vector. A window's loss is its mean next-token
# cross-entropy. Use `torch.autograd.grad` one window at a time; `resid.tda.gradients` is the
# reference.


# %% tags=["starter"]
def tracin_step(model: Transformer, lr: float, train: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
    """[test, train]: lr x (gradient of the test window's loss) . (gradient of the training window's)."""
    raise NotImplementedError  # your code here


exercises.check("12.1", tracin_step)


# %% tags=["hide-cell", "solution"]
def tracin_step(model: Transformer, lr: float, train: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
    def flat_gradients(windows: torch.Tensor) -> torch.Tensor:
        rows = []
        for window in windows:
            loss = torch.nn.functional.cross_entropy(model(window[None, :-1])[0], window[1:])
            rows.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))]))
        return torch.stack(rows)  # [n, n_parameters]

    return lr * flat_gradients(test) @ flat_gradients(train).T


assert exercises.check("12.1", tracin_step)

# %% [markdown]
# ### Exercise 12.2: the damped inverse without the big matrix
#
# *Coding · difficulty 2 of 3 · about 15 minutes*
#
# The influence function needs $(F + dI)^{-1} g$ with $F = J^\top J / n$, where $J$ holds one
# gradient per training window ($n \times P$, here $P \approx 10^5$): a $P \times P$ matrix is
# out of reach, an $n \times n$ one is not. Show that
# $(J^\top J/n + dI)^{-1} v = \big(v - J^\top (ndI + JJ^\top)^{-1} J v\big)/d$ (multiply both
# sides by $J^\top J/n + dI$) and write `damped_solve(J, v, d)` with one `torch.linalg.solve`
# of size $n$.


# %% tags=["starter"]
def damped_solve(rows: torch.Tensor, v: torch.Tensor, d: float) -> torch.Tensor:
    """(J^T J / n + d I)^-1 v for J = rows ([n, P]) and v ([P]), without a P x P matrix."""
    raise NotImplementedError  # your code here


exercises.check("12.2", damped_solve)


# %% tags=["hide-cell", "solution"]
def damped_solve(rows: torch.Tensor, v: torch.Tensor, d: float) -> torch.Tensor:
    n = rows.shape[0]
    small = n * d * torch.eye(n, dtype=rows.dtype) + rows @ rows.T  # [n, n]
    return (v - rows.T @ torch.linalg.solve(small, rows @ v)) / d


assert exercises.check("12.2", damped_solve)

# %% [markdown]
# ## The planted string: a known answer
#
# For each artefact prompt, every training window's score; the planted windows are marked. A
# method that finds them puts them at the top: the share of them among its top `n_planted`
# is its recall (chance: `n_planted / n_train`).

# %% tags=["plot"] alt="Two scatter plots, TracIn and the influence function, of every training window's score against its rank for the first artefact prompt, the windows with the planted artefact in red."
first = seeds[0]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for ax, method in zip(axes, ("TracIn", "influence"), strict=True):
    row = score_tables[first][method][n_test].numpy()  # the first artefact prompt
    order = np.argsort(-row)
    ranks = np.empty_like(order)
    ranks[order] = np.arange(len(row))
    is_planted = np.isin(np.arange(n_train), planted_rows.numpy())
    ax.scatter(ranks[~is_planted], row[~is_planted], s=4, color="grey", label="clean windows")
    ax.scatter(ranks[is_planted], row[is_planted], s=30, color="C3", label="windows with the artefact")
    ax.set(xscale="symlog", xlabel="rank of the training window", ylabel="score (proponent > 0)",
           title=f"{method}: the first artefact prompt, seed {first}")  # fmt: skip
    ax.legend(fontsize=8, loc="upper right")
fig.tight_layout()
plt.show()

# %%
recall_table = recalls.groupby("method")["recall"].agg(["mean", "min", "max"])
recall_table["chance"] = n_planted / n_train
control = controls.pivot_table(index=["seed", "prompt"], columns="removed", values="loss rise")
control_gap = control["the planted windows"] - control["as many random windows"]
control_estimate = stats.bootstrap(torch.tensor(control_gap.to_numpy()), n_resamples=n_resamples)
ledger.check(
    "positive control: retraining without the planted windows raises the artefact prompts' loss, "
    "more than removing as many random windows (interval above 0)",
    control_estimate.item().low > 0,
    control_estimate.text(fmt="+.2f") + " nats",
)  # fmt: skip
display(recall_table.style.format("{:.3f}"))
display(controls.groupby("removed")["loss rise"].agg(["mean", "min", "max"]).style.format("{:+.3f}"))

# %% [markdown]
# ### Exercise 12.3: one checkpoint or four
#
# *Predict, then code and check · difficulty 2 of 3 · about 20 minutes*
#
# TracIn above adds up four checkpoints. **Predict** first: with the last checkpoint alone,
# does it still put every planted window in its top 8 for every artefact prompt? Then write
# `last_checkpoint_tracin(trained, train, prompts, last)`, TracIn's scores from the final
# checkpoint only (`trained.checkpoints` holds `(state dict, learning rate)` pairs; a
# `resid.tda.Trained` can be built with fewer), for the seed-0 model.

# %% tags=["starter"]
exercises.predict("12.3", ...)  # "yes" or "no"


def last_checkpoint_tracin(
    trained: tda.Trained, train: torch.Tensor, prompts: torch.Tensor, last: int
) -> torch.Tensor:
    """[prompt, train] TracIn scores from the last checkpoint alone (each prompt's loss over its
    last `last` bytes)."""
    raise NotImplementedError  # your code here


context = {"trained": per_seed[first]["full"], "train": train, "prompts": artefact_prompts,
           "last": continuation, "planted": planted_rows.tolist()}  # fmt: skip
exercises.check("12.3", last_checkpoint_tracin, **context)


# %% tags=["hide-cell", "solution"]
def last_checkpoint_tracin(
    trained: tda.Trained, train: torch.Tensor, prompts: torch.Tensor, last: int
) -> torch.Tensor:
    only_last = tda.Trained(trained.model, trained.checkpoints[-1:], trained.losses)
    return tda.tracin(only_last, train, prompts, last)


# A guess before looking: the string is memorised by the end, so its gradients at the end still
# point at the windows that taught it.
exercises.predict("12.3", "yes")
context = {"trained": per_seed[first]["full"], "train": train, "prompts": artefact_prompts,
           "last": continuation, "planted": planted_rows.tolist()}  # fmt: skip
one_checkpoint = tda.planted_recall(
    last_checkpoint_tracin(per_seed[first]["full"], train, artefact_prompts, continuation),
    planted_rows.tolist(),
)
print(f"recall with the last checkpoint alone: {one_checkpoint.mean():.2f} (all four: "
      f"{recalls[(recalls.method == 'TracIn') & (recalls.seed == first)]['recall'].mean():.2f})")  # fmt: skip
assert exercises.check("12.3", last_checkpoint_tracin, **context)

# %% [markdown]
# ## Retraining: do the windows a method names matter more than random ones?
#
# Each test window's loss rise when its `k_removed` strongest proponents are removed and the
# model retrained, against removing as many random windows, averaged over the seeds. Beside it,
# the influence function's own prediction of each rise against the retrained one: in deep
# networks that agreement is known to be fragile {cite:p}`basu2021fragile`.

# %%
rise = runs.pivot_table(index="test window", columns="removal", values="loss rise", aggfunc="mean")
excess = {
    method: torch.tensor((rise[method] - rise["random"]).to_numpy()) for method in ("TracIn", "influence")
}

# %% tags=["plot"] alt="Two panels: the test loss rise after retraining without the top windows of TracIn, of the influence function and of a random set, one point per seed; and the retrained rise against the influence function's prediction for every removal set and seed."
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
long = rise.reset_index().melt(id_vars="test window", var_name="removal", value_name="loss rise")
sns.stripplot(data=long, x="removal", y="loss rise", order=["TracIn", "influence", "random"], ax=axes[0])
axes[0].axhline(0, color="grey", lw=1)
axes[0].set(
    ylabel="test loss rise after retraining (nats)", title=f"removing {k_removed} windows, mean over seeds"
)
# the prediction's scale: the least-squares slope of the retrained rise on the predicted one
predicted_all, actual_all = runs["influence's prediction"].to_numpy(), runs["loss rise"].to_numpy()
scale = float(predicted_all @ actual_all / (predicted_all @ predicted_all))
sns.scatterplot(data=runs, x="influence's prediction", y="loss rise", hue="removal", ax=axes[1], s=25)
axes[1].set_xscale("symlog", linthresh=0.1)
axes[1].axhline(0, color="grey", lw=1)
axes[1].set(xlabel="influence's predicted rise (nats, symmetric log)", ylabel="retrained rise (nats)",
            title=f"every removal set and seed: retrained ≈ {scale:.3f} × predicted")  # fmt: skip
axes[1].legend(fontsize=8, title="removal")
fig.tight_layout()
plt.show()

# %% [markdown]
# ### Exercise 12.4: what random removal costs
#
# *Prediction · difficulty 1 of 3 · about 10 minutes*
#
# Every removal above is compared with removing as many random windows. **Predict** the mean,
# over test windows and seeds, of a test window's loss rise when 16 random windows are removed
# (in nats; zero is a possible answer). Then compute it from `runs` and check it.

# %% tags=["starter"]
exercises.predict("12.4", ...)  # a number, in nats
mean_rise = ...  # from runs: the removals of kind "random"
exercises.check("12.4", mean_rise, random_rises=runs[runs.removal == "random"]["loss rise"].tolist())

# %% tags=["hide-cell", "solution"]
# A guess before looking: 16 of 512 windows is 3% of the data, so a small rise, a few hundredths.
exercises.predict("12.4", 0.02)
mean_rise = runs[runs.removal == "random"]["loss rise"].mean()
assert exercises.check("12.4", mean_rise, random_rises=runs[runs.removal == "random"]["loss rise"].tolist())

# %% [markdown]
# ## Do the two methods agree?
#
# For each test window and seed: the rank correlation between the two methods' scores over all
# training windows, and the overlap of their top `k_removed`.

# %%
agreement = []
for s in seeds:
    for i in range(n_test):
        a, b = score_tables[s]["TracIn"][i], score_tables[s]["influence"][i]
        top_a, top_b = (
            set(tda.top_helpers(a[None], k_removed)[0].tolist()),
            set(tda.top_helpers(b[None], k_removed)[0].tolist()),
        )
        agreement.append({"seed": s, "test window": i, "Spearman": stats.spearman(a, b),
                          "top-k overlap": len(top_a & top_b) / k_removed})  # fmt: skip
agreement = pd.DataFrame(agreement)
agreement[["Spearman", "top-k overlap"]].describe().loc[["mean", "min", "max"]].style.format("{:.2f}")

# %% [markdown]
# ## Checks
#
# The identities and sanity properties asserted along the way (a failing one stops the
# chapter). They are never counted as reproductions.

# %% tags=["checks"]
ledger.checks_table()

# %% [markdown]
# (claims-tda)=
# ## The Primer's claims, judged against their criteria
#
# The planted-string recalls pool every (artefact prompt, seed) pair's top `n_planted` and
# carry a Wilson interval over those slots; the removal rows carry a percentile bootstrap over
# test windows, each averaged over the seeds; the prediction row resamples test windows with all
# their removal sets.

# %%
for method, key in (("TracIn", "planted_tracin"), ("influence", "planted_influence")):
    hits = recalls[recalls.method == method]["recall"].to_numpy() * n_planted
    ledger.judge(key, stats.wilson_interval(int(round(hits.sum())), n_planted * len(hits)), "recall", ".2f")
for method, key in (("TracIn", "removal_tracin"), ("influence", "removal_influence")):
    rise_interval = stats.bootstrap(excess[method], n_resamples=n_resamples).item()
    ledger.judge(key, rise_interval, ours=f"Δ rise {rise_interval.text(fmt='+.3f')} nats")
by_window = runs.pivot_table(
    index="test window", columns=["seed", "removal"], values=["influence's prediction", "loss rise"]
)
predicted = torch.tensor(by_window["influence's prediction"].to_numpy())  # [test window, seed x removal]
actual = torch.tensor(by_window["loss rise"].to_numpy())
prediction = stats.bootstrap_statistic(
    lambda p, a: stats.pearson(p.flatten(), a.flatten()), predicted, actual, n_resamples=n_resamples
)
ledger.judge("influence_predicts", prediction, "Pearson r", ".2f")
ledger.claims_table()

# %% [markdown]
# **Takeaways**, computed from the measurements above.

# %% tags=["prose"]
verdicts, estimates = ledger.verdicts, ledger.estimates
planted_rise = controls.groupby("removed")["loss rise"].mean()
display(Markdown(
    f"- **The planted string.** Among the top {n_planted} training windows for a prompt ending in "
    f"the artefact, TracIn places {estimates['planted_tracin']:.0%} of the planted ones "
    f"({verdicts['planted_tracin']}) and the influence function {estimates['planted_influence']:.0%} "
    f"({verdicts['planted_influence']}), where chance is {n_planted / n_train:.1%}. Retraining without "
    f"them raises those prompts' loss by {planted_rise['the planted windows']:+.2f} nats (as many random "
    f"windows: {planted_rise['as many random windows']:+.2f}).\n"
    f"- **Retraining.** Removing a test window's {k_removed} strongest proponents raises its loss by "
    f"{estimates['removal_tracin']:+.3f} nats more than removing random windows when TracIn names them "
    f"({verdicts['removal_tracin']}), {estimates['removal_influence']:+.3f} when the influence function does "
    f"({verdicts['removal_influence']}).\n"
    f"- **Prediction.** The influence function's predicted rise and the retrained one correlate at "
    f"r = {estimates['influence_predicts']:.2f} over the removal sets ({verdicts['influence_predicts']}), "
    f"but not its size: the retrained rise is about {scale:.3f} times the predicted one (the least-squares "
    f"slope through the origin), the predictions {1 / scale:.0f} times too large. A first-order account "
    "of removing a few windows from a model trained far from a minimum, with a curvature estimated from "
    f"{n_train} gradients, ranks removals better than it sizes them, as Basu et al. (2021) found.\n"
    f"- The two methods' scores correlate at a mean Spearman ρ of {agreement['Spearman'].mean():.2f}, and "
    f"share {agreement['top-k overlap'].mean():.0%} of their top {k_removed}."
))  # fmt: skip

# %% tags=["record"]
results = ledger.results(
    quick=quick,
    seeds=list(seeds),
    n_train=n_train,
    recalls=recalls.to_dict("records"),
    controls=controls.to_dict("records"),
    removals=runs.to_dict("records"),
    agreement=agreement.to_dict("records"),
)
headline = (
    f"Among the top {n_planted} windows for a prompt ending in the planted string, TracIn places "
    f"{estimates['planted_tracin']:.0%} of the planted ones and the influence function "
    f"{estimates['planted_influence']:.0%} (chance {n_planted / n_train:.1%}); retraining without a test "
    f"window's top {k_removed} proponents raises its loss by {estimates['removal_tracin']:+.3f} nats "
    f"(TracIn) and {estimates['removal_influence']:+.3f} (influence) more than removing random windows."
)
book.save_results(results, rerun={"n_train": n_train, "n_test": n_test, "seeds": seeds, "seed": seed},
                  headline=headline)  # fmt: skip
