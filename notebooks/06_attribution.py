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
# # Attribution: which tokens and which components a prediction rests on
#
# :::{admonition} What this chapter found, and how to rerun it
# :class: tip
# **Result:** {glue:md}`chapter_result`
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with
# SmolLM2 and Gemma-3-270M converted and cached; {glue:text}`rerun_cold` from a cold cache.
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **This chapter reproduces** the attribution methods of {cite:t}`ferrando2024primer` (sections on input
# attribution and on component attribution): gradient, gradient × input, integrated gradients
# {cite:p}`sundararajan2017ig`, occlusion and contrastive attribution
# {cite:p}`yin2022contrastive`; the direct logit attribution and the logit lens
# {cite:p}`nostalgebraist2020logitlens`, on SmolLM2's indirect-object identification
# {cite:p}`wang2023ioi` and capital cities, with a second round on new prompts and on
# Gemma-3-270M. Which claims are confirmatory (criterion committed before any result it judges)
# and which exploratory is on the results page, read from the repository's history.
#
# **The claims.** The *Primer* of {cite:t}`ferrando2024primer` sorts the ways of localising a prediction
# into two families. *Input attribution* scores each input token: the gradient's norm,
# gradient × input, integrated gradients (IG, which is *complete*: its scores sum to
# $f(x) - f(\tilde x)$), occlusion (delete the token and see what changes), and contrastive
# versions that explain "this answer rather than that one". *Component attribution* uses the
# residual stream being a sum: the final logit is a sum of one term per head, per MLP and for
# the embedding (the *direct logit attribution*, DLA), and reading the residual out early
# (the *logit lens*) shows when the answer appears. The Primer warns that gradient methods
# are noisy and that attribution to a single next token mixes reasons (grammar and meaning)
# that a contrastive foil separates.
#
# **The experiment.** SmolLM2-135M on two behaviours it actually performs, checked first:
# indirect-object identification ("When Mary and John went to the store, John gave a drink
# to" → " Mary") and capital cities ("The capital of France is" → " Paris"). Every method
# runs on the same prompts, and we ask where they agree.

# %% tags=["parameters"]
model_name = "smollm2-135m"  # [model]
n_ioi = 120  # [> 0] IOI prompts for validation and the direct logit attribution
n_attribution = 8  # [> 0] prompts per behaviour for the input-attribution comparison
ig_steps = 128  # [> 0] integration steps of integrated gradients
smoothgrad_samples = 32  # [> 0] noisy copies of the input that SmoothGrad averages over
n_deletion = 20  # [> 0] prompts per behaviour for the deletion curves (LRP against the gradient methods)
ig_convergence_steps = (64, 256, 1024, 2048)  # [non-empty, > 0] for the completeness check on one prompt
second_model = "gemma3-270m"  # [model] the second round's second pretrained model
n_new_ioi = 64  # [> 2] new IOI prompts (seed new_ioi_seed) for the second round on SmolLM2
n_new_ioi_second = 48  # [> 2] as many for the second model
new_ioi_seed = 1001  # [min 0] the second round's draw of IOI prompts, used by no other chapter
seed = 0  # [min 0]
quick = False  # a small run for CI

# %% tags=["setup"]
import re
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from IPython.display import Markdown, display

import resid
from resid import attribution, behaviours, book, circuits, data, exercises, heads, lrp, progress, stats

ledger = book.start_chapter("attribution", seed)  # criteria, claims and checks; theme and seed
# captum's gradient methods warn that an input did not ask for gradients: they set it themselves
warnings.filterwarnings("ignore", message="Input Tensor 0 did not already require gradients")
if quick:
    n_ioi, n_attribution, ig_steps, ig_convergence_steps, smoothgrad_samples = 24, 3, 8, (8, 32), 2
    n_deletion, n_new_ioi, n_new_ioi_second = 5, 3, 6  # two prompts per behaviour beyond the attributed ones
model = resid.load(model_name)
tokenizer = model.tokenizer
print(f"{model_name}: {model.cfg.n_layers} layers × {model.cfg.n_heads} heads, d_model {model.cfg.d_model}")

# %% [markdown]
# ## First: does the model do the tasks?
#
# A circuit is only worth finding for a behaviour the model has. IOI prompts come from six
# templates with single-token names, places and objects; the counterfactual of each prompt
# repeats the other name, which flips the answer. Capitals are kept where the capital is one
# token; only those the model gets right are used below.

# %%
ioi = behaviours.ioi_prompts(tokenizer, n_ioi, seed=seed)
capital_set = behaviours.capital_prompts(tokenizer)
texts, capital_tokens, capitals = capital_set.text, capital_set.tokens, capital_set.answers
with torch.no_grad():
    capital_logits = model(capital_tokens)[:, -1]
correct = capital_logits.argmax(-1) == capitals
validation = pd.DataFrame(
    [
        {
            "behaviour": "IOI",
            "prompts": len(ioi),
            **behaviours.answer_accuracy(model, ioi.tokens, ioi.answers, ioi.foils),
        },
        {
            "behaviour": "IOI counterfactual (answer flipped)",
            "prompts": len(ioi),
            **behaviours.answer_accuracy(model, ioi.counterfactual, ioi.foils, ioi.answers),
        },
        {
            "behaviour": "capital cities",
            "prompts": len(capitals),
            **behaviours.answer_accuracy(model, capital_tokens, capitals),
        },
    ]
)
display(validation.style.format(precision=3).hide(axis="index"))
print("e.g.", ioi.text[0], "→", tokenizer.decode([int(ioi.answers[0])]))

# %% [markdown]
# ## Input attribution: gradients, occlusion, attention
#
# Seven methods, each scoring every input token: the gradient norm, gradient × input,
# integrated gradients (IG) and **SmoothGrad** {cite:p}`smilkov2017smoothgrad` (the gradient
# norm averaged over copies of the input with Gaussian noise added, so that the plain
# gradient's noise averages out); occlusion (delete the token, rerun); and two that read
# attention instead of gradients, **attention rollout** {cite:p}`abnar2020rollout` (every
# layer's attention, averaged over heads, composed from the last position back to the inputs)
# and the same rollout with attention **weighted by the norm of what it moves**
# {cite:p}`kobayashi2020attention` (a head attending to a token whose value vector is near
# zero, an attention sink, then counts for little). The two attention methods explain no
# particular logit, so they are the same for the plain and the contrastive score. Whether
# SmoothGrad and value weighting agree with occlusion better than the methods they refine is
# judged as a claim in the IOI chapter ({ref}`claims-ioi`), on its held-out prompts; here they
# join the comparison on this chapter's prompts.
#
# For IOI the score explained is the logit difference between the indirect object and the
# subject (contrastive by construction), and, for comparison, the plain logit of the
# indirect object. For capitals it is the capital's logit, and contrastively its margin over
# the capital the model ranks next. IG integrates from a baseline that puts the mean token
# embedding at every position (why not zero: see `resid.attribution.input_attributions`).
# Every prompt starts with SmolLM2's BOS token, which holds the model's attention sink; it
# is kept fixed and left out of the scores.

# %%
capital_ids = torch.tensor(sorted(set(capitals.tolist())))
runs = []


def ioi_case(i: int) -> tuple:
    return "IOI", i, ioi.tokens[i], int(ioi.answers[i]), int(ioi.foils[i])


def capital_case(i: int) -> tuple:
    """A capital prompt, its capital, and as the foil the capital the model ranks next."""
    others = capital_logits[i, capital_ids].clone()
    others[capital_ids == capitals[i]] = -torch.inf
    return "capital", i, capital_tokens[i], int(capitals[i]), int(capital_ids[others.argmax()])


right = correct.nonzero()[:, 0].tolist()
cases = [ioi_case(i) for i in range(n_attribution)] + [capital_case(i) for i in right[:n_attribution]]
completeness = []
for task, i, tokens, target, foil in cases:
    head_mean = heads.attention_patterns(model, tokens[None]).mean(2)  # [layer, batch, query, key]
    rollouts = {
        "attention rollout": attribution.attention_rollout(head_mean)[0, -1],
        "value-weighted rollout": attribution.attention_rollout(
            attribution.value_weighted_attention(model, tokens[None])
        )[0, -1],
    }
    for contrastive in (False, True):
        frame, check = attribution.input_attributions(
            model, tokens, target, foil if contrastive else None, ig_steps, skip_first=True
        )
        frame["SmoothGrad"] = attribution.smoothgrad(
            model, tokens, target, foil if contrastive else None, smoothgrad_samples, seed=seed
        ).tolist()
        for method, scores in rollouts.items():
            frame[method] = scores.tolist()
        frame["task"], frame["prompt"], frame["contrastive"] = task, i, contrastive
        frame["text"] = [tokenizer.decode([t]) for t in frame["token"]]
        runs.append(frame)
        completeness.append({"task": task, "prompt": i, "contrastive": contrastive, **check})
attributions = pd.concat(runs, ignore_index=True)
completeness = pd.DataFrame(completeness)
methods = ["gradient norm", "gradient x input", "integrated gradients", "SmoothGrad", "occlusion",
           "attention rollout", "value-weighted rollout"]  # fmt: skip
attributions = attributions[attributions.position > 0]  # the BOS token
print(
    f"IG completeness over {len(completeness)} attributions ({ig_steps} steps): relative error "
    f"median {completeness['relative error'].median():.2f}, max {completeness['relative error'].max():.2f}"
)

# %% [markdown]
# Completeness is an identity of the integral, so any error is the numerical integration's: a
# Riemann sum is only as good as the path is smooth. On the first IOI prompt, SmolLM2's logit
# difference at 201 points along the straight path from the baseline to the prompt, and the
# completeness error as the number of steps grows:

# %%
task, i, tokens, target, foil = cases[0]
score = attribution.prediction_score(model, tokens.reshape(1, -1), target, foil)
start = attribution.mean_embedding_baseline(model, tokens.reshape(1, -1), keep_first=True)
with torch.no_grad():
    inputs = model.embed_tokens(tokens.reshape(1, -1))
    alphas = torch.linspace(0, 1, 201)
    along = torch.cat([score(start + a.view(-1, 1, 1) * (inputs - start)) for a in alphas.split(25)])
convergence = pd.DataFrame(
    [
        {"steps": n, **attribution.input_attributions(model, tokens, target, foil, n, skip_first=True)[1]}
        for n in ig_convergence_steps
    ]
)

# %% tags=["plot"] alt="Two panels on integrated gradients: the logit difference along the straight path from the baseline to the prompt, and the completeness error against the number of integration steps."
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
axes[0].plot(alphas, along)
axes[0].set(xlabel="α (0 = baseline, 1 = prompt)", ylabel="logit(IO) − logit(S)", title="f along the IG path")
axes[1].plot(convergence.steps, convergence["relative error"], marker="o")
axes[1].set(
    xscale="log",
    yscale="log",
    xlabel="integration steps",
    ylabel="|Σ IG − Δf| / |Δf|",
    title="completeness error",
)
plt.tight_layout()
plt.show()

# %%
largest_jump = (along[1:] - along[:-1]).abs().max().item()
print(f"largest change of f between neighbouring points (Δα = 0.005): {largest_jump:.2f} logits")

# %% [markdown]
# One prompt of each kind, every method (scores scaled to the largest magnitude per method;
# the last token is where the prediction is made, so occlusion cannot delete it):

# %% tags=["plot"] alt="Two heatmaps, one for the IOI prompt (contrastive) and one for the capital-city prompt: every attribution method's score for every input token."
fig, axes = plt.subplots(2, 1, figsize=(10, 9))
for ax, (task, contrastive) in zip(axes, [("IOI", True), ("capital", False)], strict=True):
    first = attributions[(attributions.task == task) & (attributions.contrastive == contrastive)]
    first = first[first.prompt == first.prompt.iloc[0]]
    grid = first[methods].T
    grid = grid.div(grid.abs().max(axis=1), axis=0)
    sns.heatmap(
        grid,
        ax=ax,
        cmap="RdBu_r",
        center=0,
        vmin=-1,
        vmax=1,
        xticklabels=first["text"].tolist(),
        annot=True,
        fmt=".2f",
        cbar=False,
    )
    ax.set_title(f"{task}{' (contrastive)' if contrastive else ''}: scores per input token")
    ax.tick_params(axis="x", rotation=0)
plt.tight_layout()
plt.show()

# %% [markdown]
# Do the methods rank tokens alike? Spearman correlation of the importance ranking (absolute
# scores, last token left out), averaged over prompts:


# %%
per_prompt_agreement = [
    group.iloc[:-1][methods].abs().corr(method="spearman")
    for _, group in attributions.groupby(["task", "prompt", "contrastive"])
]
agreement = sum(per_prompt_agreement) / len(per_prompt_agreement)

# %% tags=["plot"] alt="Annotated heatmap of the mean Spearman rank agreement between every pair of attribution methods."
fig, ax = plt.subplots(figsize=(7, 5.5))
sns.heatmap(agreement, annot=True, fmt=".2f", cmap="viridis", vmin=-0.2, vmax=1, ax=ax)
ax.set_title("rank agreement between methods (mean Spearman)")
plt.show()

# %% tags=["prose"]
with_occlusion = torch.tensor(
    [[a.loc[m, "occlusion"] for m in methods if m != "occlusion"] for a in per_prompt_agreement],
    dtype=torch.float64,
)  # [attribution, method]
refinements = {("SmoothGrad", "gradient norm"), ("value-weighted rollout", "attention rollout")}
others = [m for m in methods if m != "occlusion"]
lines = []
for better, base in sorted(refinements):
    difference = with_occlusion[:, others.index(better)] - with_occlusion[:, others.index(base)]
    estimate, low, high = (v.item() for v in stats.bootstrap(difference, seed=seed))
    lines.append(f"{better} minus {base}: {estimate:+.2f} [{low:+.2f}, {high:+.2f}]")
display(Markdown(
    f"Rank agreement with occlusion, over the {len(per_prompt_agreement)} attributions above (95% bootstrap "
    "intervals, paired by attribution): " + "; ".join(lines) + ". These prompts are few and the plain "
    "and contrastive scores share a prompt, so the claims are judged in the IOI chapter, on its held-out "
    "prompts."))  # fmt: skip

# %% [markdown]
# And which token does each method put first? For IOI the informative tokens are the two
# names (where the indirect object and the subject appear), for capitals the country.


# %%
def key_positions(task: str, i: int) -> set[int]:
    if task == "capital":
        return {capital_tokens.shape[1] - 2}  # "... of <country> is"
    ids = ioi.tokens[i].tolist()
    return {p for p, t in enumerate(ids) if t in (int(ioi.answers[i]), int(ioi.foils[i]))}


top_rows = []
for (task, i, contrastive), group in attributions.groupby(["task", "prompt", "contrastive"]):
    body = group.iloc[:-1]
    for method in methods:
        top = int(body.loc[body[method].abs().idxmax(), "position"])
        top_rows.append(
            {
                "task": task,
                "prompt": i,
                "contrastive": contrastive,
                "method": method,
                "top token is a key token": top in key_positions(task, i),
            }
        )
top_rows = pd.DataFrame(top_rows)
top_table = top_rows.pivot_table(
    index=["task", "contrastive"], columns="method", values="top token is a key token"
)
display(top_table.style.format("{:.0%}").background_gradient(cmap="Greens", vmin=0, vmax=1))

# %% [markdown]
# ### Exercise 6.1: gradient × input by hand
#
# *Coding · difficulty 2 of 3 · about 15 minutes*
#
# `attribution.prediction_score(model, tokens, target, foil)` is the function being explained:
# it maps input embeddings (`model.embed_tokens(tokens)`) to the logit difference. Compute
# gradient × input for the first IOI prompt with `torch.autograd.grad` (the gradient with
# respect to each position's embedding, times the embedding, summed over `d_model`), and check
# it against the contrastive scores in `attributions`.


# %% tags=["starter"]
def gradient_x_input(model, tokens: torch.Tensor, target: int, foil: int) -> torch.Tensor:
    """Gradient × input of the logit difference target - foil, one score per position of
    tokens ([1, pos]), summed over d_model."""
    raise NotImplementedError  # your code here


task, i, prompt, target, foil = cases[0]
exercises.check("6.1", gradient_x_input, model=model, tokens=prompt.reshape(1, -1), target=target, foil=foil)

# %% tags=["hide-cell", "solution"]
task, i, prompt, target, foil = cases[0]
score = attribution.prediction_score(model, prompt.reshape(1, -1), target, foil)
embeddings = model.embed_tokens(prompt.reshape(1, -1)).detach().requires_grad_()
(gradient,) = torch.autograd.grad(score(embeddings).sum(), embeddings)
by_hand = (gradient * embeddings).sum(-1)[0].detach().numpy()
library = attributions[(attributions.task == task) & (attributions.prompt == i) & attributions.contrastive]
ledger.check(
    "gradient × input by hand equals resid.attribution's",
    np.allclose(by_hand[library.position], library["gradient x input"], rtol=1e-3, atol=1e-4),
)  # fmt: skip
print("position by position:", np.round(by_hand[library.position], 3))

# %% [markdown]
# ### Exercise 6.2: integrated gradients by hand
#
# *Predict, then code and check · difficulty 2 of 3 · about 20 minutes*
#
# Integrated gradients credits position $i$ with its share of the change of $f$ along the
# straight path from the baseline $x'$ to the input $x$:
# $\mathrm{IG}_i = (x_i - x'_i) \cdot \int_0^1 \nabla_i f(x' + \alpha (x - x'))\, d\alpha$,
# summed over `d_model`. Write it with the right Riemann sum, $\alpha_k = k/m$ for
# $k = 1, \dots, m$, all $m$ points of the path in one batch through `score` (the function
# `attribution.prediction_score` returns takes `[batch, pos, d_model]`). **Predict** first, from
# the figure above: with $m = 16$, how far will the sum of your attributions be from
# $f(x) - f(x')$, as a fraction of it? (The figure's curve is Captum's, whose points are
# Gauss–Legendre nodes rather than the right Riemann sum's.)

# %% tags=["starter"]
exercises.predict("6.2", ...)  # |Σ IG − Δf| / |Δf| with 16 steps: a number


def integrated_gradients(score, inputs: torch.Tensor, baseline: torch.Tensor, steps: int) -> torch.Tensor:
    """IG of score from baseline to inputs ([1, pos, d_model] each) by the right Riemann sum: [pos]."""
    raise NotImplementedError  # your code here


exercises.check("6.2", integrated_gradients, score=score, inputs=inputs, baseline=start, steps=16)


# %% tags=["hide-cell", "solution"]
def integrated_gradients(score, inputs: torch.Tensor, baseline: torch.Tensor, steps: int) -> torch.Tensor:
    alphas = torch.arange(1, steps + 1, dtype=inputs.dtype) / steps
    path = baseline + alphas.view(-1, 1, 1) * (inputs - baseline)  # [step, pos, d_model]
    path = path.detach().requires_grad_()
    (gradient,) = torch.autograd.grad(score(path).sum(), path)
    return ((inputs - baseline)[0] * gradient.mean(0)).sum(-1).detach()


# a first-order rule's error shrinks like 1/m: four times the figure's error at 64 steps
exercises.predict("6.2", 4 * convergence.set_index("steps")["relative error"].iloc[0])
riemann = integrated_gradients(score, inputs, start, 16)
with torch.no_grad():
    change = (score(inputs) - score(start)).item()
print(f"16 steps: Σ IG = {riemann.sum():.3f} against f(x) − f(x') = {change:.3f}")
assert exercises.check("6.2", integrated_gradients, score=score, inputs=inputs, baseline=start, steps=16)

# %% [markdown]
# ## Relevance propagation, and which ranking is faithful
#
# **Layer-wise relevance propagation** (LRP) {cite:p}`bach2015lrp` decomposes a prediction
# layer by layer with custom propagation rules that keep the total relevance conserved, so that
# the input tokens' relevances add up to the score explained. For transformers we use the
# rules of {cite:t}`ali2022xai` with {cite:t}`achtibat2024attnlrp`'s rules for gated MLPs
# (`resid.lrp`): a norm's divisor and an attention pattern are held constant, an activation
# passes its relevance on unchanged, a gated product gives half to each factor, and linear maps
# pass it on in proportion to their terms. In practice that is gradient × input through a
# backward pass that follows those rules; SmolLM2 has no biases, so the relevances must add up
# to the score exactly, which is asserted on every prompt below.
#
# Which ranking of the input tokens is *faithful*? A **deletion curve** deletes the tokens in
# the order a method ranks them (most supporting first) and follows the score: the faster it
# falls, the better the ranking found what the prediction rests on. The area over it (the mean
# drop over 1..K deletions, as a share of the full prompt's score) compares methods on equal
# terms, with occlusion's order as the reference and a random order as the floor. The claim
# from the LRP literature: LRP beats gradient × input and integrated gradients. The prompts are
# the first `n_deletion` IOI prompts and capital prompts the model answers (the first
# `n_attribution` of each are those above), the scores contrastive; the two criteria were
# committed before this section first ran.

# %%
deletion_cases = [ioi_case(i) for i in range(min(n_deletion, len(ioi)))]
deletion_cases += [capital_case(i) for i in right[:n_deletion]]
deletion_generator = torch.Generator().manual_seed(seed)
area_rows, lrp_errors, example_curves = [], [], {}
heldout_agreement = []  # [prompt, (gradient norm, gradient x input)]: prompts not attributed above
attributed = {("IOI", i) for i in range(n_attribution)} | {("capital", i) for i in right[:n_attribution]}
t0 = time.time()
for task, i, tokens, target, foil in deletion_cases:
    frame, _ = attribution.input_attributions(model, tokens, target, foil, ig_steps, skip_first=True)
    if (task, i) not in attributed:  # over the tokens occlusion scores (not the first, nor the last)
        ranks = frame[["gradient norm", "gradient x input", "occlusion"]].abs().corr(method="spearman")
        heldout_agreement.append(
            [ranks.loc["gradient norm", "occlusion"], ranks.loc["gradient x input", "occlusion"]]
        )
    relevances, terms = lrp.relevance(model, tokens, target, foil)
    lrp_errors.append(terms["relative error"])

    def contrast(kept: torch.Tensor, target: int = target, foil: int = foil) -> torch.Tensor:
        logits = model(kept)[:, -1].float()  # [order, vocab]
        return logits[:, target] - logits[:, foil]

    deletable = list(range(1, len(tokens) - 1))  # never the BOS token, nor the last
    rankings = {
        "LRP": relevances.numpy(),
        "gradient x input": frame["gradient x input"].to_numpy(),
        "integrated gradients": frame["integrated gradients"].to_numpy(),
        "occlusion": frame["occlusion"].to_numpy(),
    }
    orders = {method: sorted(deletable, key=lambda p: -values[p]) for method, values in rankings.items()}
    random_orders = [
        [deletable[j] for j in torch.randperm(len(deletable), generator=deletion_generator).tolist()]
        for _ in range(5)
    ]
    # every order deletes one token per step, so all nine curves of a prompt run as one batch
    curves = lrp.deletion_curves(tokens, [*orders.values(), *random_orders], contrast).tolist()
    row = {"task": task, "prompt": i}
    for method, curve in zip(orders, curves, strict=False):
        row[method] = lrp.deletion_area(curve)
        if not example_curves.get(task, {}).get(method):
            example_curves.setdefault(task, {})[method] = curve
    row["random order"] = float(np.mean([lrp.deletion_area(curve) for curve in curves[len(orders):]]))
    area_rows.append(row)
areas = pd.DataFrame(area_rows)
ledger.check(
    "LRP's relevances add up to the explained score on every deletion prompt (SmolLM2 has no biases)",
    max(lrp_errors) < 1e-4, f"largest relative error {max(lrp_errors):.1e} over {len(lrp_errors)} prompts",
)  # fmt: skip
deletion_methods = ["random order", "gradient x input", "integrated gradients", "LRP", "occlusion"]
area_summary = pd.DataFrame(
    [
        {"method": m, **dict(zip(["area", "low", "high"], [float(v) for v in stats.bootstrap(
            torch.tensor(areas[m].to_numpy()), seed=seed)], strict=True))}
        for m in deletion_methods
    ]
)  # fmt: skip
print(f"{len(areas)} prompts ({(areas.task == 'IOI').sum()} IOI, {(areas.task == 'capital').sum()} capital) "
      f"in {time.time() - t0:.0f} s")  # fmt: skip
display(area_summary.style.format(precision=3).hide(axis="index"))

# %% tags=["plot"] alt="Two panels on deletion curves: each method's area over the deletion curve with its 95% interval over prompts, and the score as tokens are deleted in each method's order for the first IOI prompt."
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
ax = axes[0]
ax.errorbar(area_summary["area"], range(len(area_summary)),
            xerr=[area_summary["area"] - area_summary["low"], area_summary["high"] - area_summary["area"]],
            fmt="o", capsize=3)  # fmt: skip
ax.set_yticks(range(len(area_summary)), area_summary["method"])
ax.set(
    xlabel="area over the deletion curve (higher: more faithful)",
    title=f"{len(areas)} prompts, 95% intervals",
)
ax = axes[1]
for method, curve in example_curves["IOI"].items():
    ax.plot(range(len(curve)), np.array(curve) / curve[0], marker=".", label=method)
ax.axhline(0, color="black", lw=0.8)
ax.set(xlabel="tokens deleted", ylabel="score / full prompt's", title="the first IOI prompt")
ax.legend(frameon=False, fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Exercise 6.3: the area over a deletion curve
#
# *Coding · difficulty 1 of 3 · about 10 minutes*
#
# A deletion curve is a list of scores: the full prompt's, then one after each deletion. Write
# the area the table above reports: the mean drop over the deletions, divided by the magnitude
# of the full prompt's score. The check tries it on curves it makes up.


# %% tags=["starter"]
def deletion_area(curve: list[float]) -> float:
    """The mean over k = 1..K of (curve[0] - curve[k]), divided by |curve[0]|."""
    raise NotImplementedError  # your code here


exercises.check("6.3", deletion_area)


# %% tags=["hide-cell", "solution"]
def deletion_area(curve: list[float]) -> float:
    return float(np.mean([curve[0] - later for later in curve[1:]]) / abs(curve[0]))


lrp_curve = example_curves["IOI"]["LRP"]
print(f"the first IOI prompt's LRP curve: area {deletion_area(lrp_curve):.3f}")
assert exercises.check("6.3", deletion_area)


# %% [markdown]
# ## Direct logit attribution on IOI
#
# With the final norm's scale frozen at its value on each prompt, the logit difference
# "indirect object − subject" is a sum of one term per component. The terms must add up to
# the model's own logit difference; we check that before looking at them.

# %%
dla, dla_check = attribution.direct_logit_attribution(model, ioi.tokens, ioi.answers, ioi.foils)
dla_error = abs(dla_check["sum of contributions"] - dla_check["model logit"])
ledger.check(
    "the direct logit attributions add up to the model's logit difference", dla_error < 1e-3,
    f"sum {dla_check['sum of contributions']:.4f} vs logit difference {dla_check['model logit']:.4f}",
)  # fmt: skip
head_rows = dla[dla.component.str.match(r"L\d+H\d+")].copy()
head_rows[["layer", "head"]] = head_rows.component.str.extract(r"L(\d+)H(\d+)").astype(int)
head_map = head_rows.pivot(index="layer", columns="head", values="dla")
mlps = dla[dla.component.str.endswith("MLP")]

# %% tags=["plot"] alt="A heatmap of every head's direct effect on the IO minus S logit (layer by head, red positive, blue negative) beside bars of each MLP's direct effect."
fig, axes = plt.subplots(1, 2, figsize=(10, 6), gridspec_kw={"width_ratios": [1, 1.3]})
limit = head_map.abs().max().max()
sns.heatmap(head_map, cmap="RdBu_r", center=0, vmin=-limit, vmax=limit, ax=axes[0])
axes[0].set_title("direct effect of each head on logit(IO) − logit(S)")
axes[1].barh(range(len(mlps)), mlps["dla"].values, color="C1")
axes[1].set_yticks(range(len(mlps)), [c.replace(" MLP", "") for c in mlps.component])
axes[1].invert_yaxis()
axes[1].set_title(
    "direct effect of each MLP (and the embedding: {:.2f})".format(
        dla.loc[dla.component == "embed", "dla"].item()
    )
)
plt.tight_layout()
plt.show()

# %%
top_components = dla.reindex(dla["dla"].abs().sort_values(ascending=False).index).head(10)
display(top_components.style.format({"dla": "{:+.3f}"}).hide(axis="index"))

# %% [markdown]
# ### Exercise 6.4: one head's direct effect, by hand
#
# *Predict, then code and check · difficulty 3 of 3 · about 25 minutes*
#
# Take the head with the largest |DLA|. Its write to the residual stream at the last position is
# its output `blocks.{L}.attn.hook_z[:, -1, H]` times its slice of the output matrix
# (`W_O.weight[:, H*d_head:(H+1)*d_head]`). Pass that through the final norm frozen at each
# prompt's scale (`attribution.frozen_final_norm`) and project it on
# $W_U[\text{IO}] - W_U[\text{S}]$. Check your mean over prompts against `dla`. **Predict**
# first: if you ablated this head, would the logit difference fall by exactly this much?

# %% tags=["starter"]
exercises.predict("6.4", ...)  # "yes" or "no": would ablating it lower the logit difference by exactly this?


def head_dla(model, tokens, answers, foils, layer: int, head: int) -> float:
    """The head's direct effect on the logit difference at the last position, mean over prompts."""
    raise NotImplementedError  # your code here


top_head = head_rows.loc[head_rows["dla"].abs().idxmax(), "component"]
layer, head = map(int, re.fullmatch(r"L(\d+)H(\d+)", top_head).groups())
exercises.check("6.4", head_dla, model=model, tokens=ioi.tokens, answers=ioi.answers, foils=ioi.foils,
                layer=layer, head=head)  # fmt: skip

# %% tags=["hide-cell", "solution"]
top_head = head_rows.loc[head_rows["dla"].abs().idxmax(), "component"]
layer, head = map(int, re.fullmatch(r"L(\d+)H(\d+)", top_head).groups())
final_name = model.resid_names()[-1]
with torch.no_grad():
    _, head_cache = model.run_with_cache(ioi.tokens, [f"blocks.{layer}.attn.hook_z", final_name])
    d_head = model.cfg.head_dim
    w_o = model.blocks[layer].attn.W_O.weight[:, head * d_head : (head + 1) * d_head]
    head_write = head_cache[f"blocks.{layer}.attn.hook_z"][:, -1, head] @ w_o.T
    normed = attribution.frozen_final_norm(model, head_cache[final_name][:, -1])(head_write)
    direction = model.unembed.weight[ioi.answers] - model.unembed.weight[ioi.foils]
    head_dla = (normed * direction).sum(-1).mean().item()
library_dla = dla.loc[dla.component == top_head, "dla"].item()
ledger.check(
    "one head's direct effect by hand equals resid.attribution's",
    abs(head_dla - library_dla) < 1e-3 * max(1.0, abs(library_dla)), f"{top_head}: {head_dla:+.4f}",
)  # fmt: skip
print(f"{top_head}: {head_dla:+.4f} by hand, {library_dla:+.4f} from resid. Not necessarily: the DLA is "
      "the direct path only; ablating the head also changes what later layers read (the patching "
      "chapter measures that).")  # fmt: skip

# %% [markdown]
# ## The logit lens on capital cities
#
# The residual stream after each block, read out through the final norm and unembedding, on
# the prompts the model answers correctly: when does the capital become the top prediction?

# %%
lens_by_prompt = attribution.logit_lens(model, capital_tokens[correct], capitals[correct], per_prompt=True)
lens = lens_by_prompt.groupby("layer").mean().drop(columns="prompt").reset_index()

# %% tags=["plot"] alt="Two panels of the logit lens at every layer boundary for a capital-city prompt: the probability of the capital, and its rank on a log scale."
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
axes[0].plot(lens.layer, lens.probability, marker="o")
axes[0].set(xlabel="layer boundary (0 = embedding)", ylabel="P(capital)", title="logit lens: probability")
axes[1].plot(lens.layer, lens["rank"] + 1, marker="o", color="C2")
axes[1].set(xlabel="layer boundary", ylabel="rank of the capital", yscale="log", title="logit lens: rank")
plt.tight_layout()
plt.show()

# %%
first_top1 = lens.loc[lens["top-1 accuracy"] >= 0.5, "layer"].min()
print(
    f"the capital is the top-1 readout for at least half the prompts from boundary {first_top1} "
    f"of {model.cfg.n_layers}"
)

# %% [markdown]
# ### Exercise 6.5: the lens at both ends
#
# *Predict, then code and check · difficulty 2 of 3 · about 15 minutes*
#
# Read the residual stream of the capital prompts yourself (`model.residual_stream`), apply the
# final norm (`model.ln_final`) and the unembedding (`model.unembed`) to the last position at
# every boundary. **Predict** two things first: at the last boundary, how does your readout
# compare with the model's own logits? At boundary 0 (the embedding alone), which token does it
# rank first for "... is"?

# %% tags=["starter"]
exercises.predict("6.5", ...)  # the token the lens ranks first at boundary 0 for the first prompt


def lens_readout(model, tokens: torch.Tensor) -> torch.Tensor:
    """[boundary, prompt, vocab]: the last position's residual at every boundary, read out
    through the final norm and the unembedding."""
    raise NotImplementedError  # your code here


exercises.check("6.5", lens_readout, model=model, tokens=capital_tokens, decode=tokenizer.decode)

# %% tags=["hide-cell", "solution"]
with torch.no_grad():
    n_prompts, n_positions = capital_tokens.shape  # residual_stream flattens prompts and positions
    stream = model.residual_stream(capital_tokens).view(-1, n_prompts, n_positions, model.cfg.d_model)
    stream = stream[:, :, -1]  # [boundary, prompt, d_model] at the last position
    readout = model.unembed(model.ln_final(stream))
    output = model(capital_tokens)[:, -1]
ledger.check(
    "the logit lens at the last boundary is the model's output",
    bool(torch.allclose(readout[-1], output, atol=1e-3)),
    f"max |readout - logits| {(readout[-1] - output).abs().max().item():.1e}",
)  # fmt: skip
first_guess = tokenizer.decode([int(readout[0, 0].argmax())])
last_input = tokenizer.decode([int(capital_tokens[0, -1])])
echo = (" the input token itself: read back through the (tied) unembedding, a token's embedding points "
        "at that token" if first_guess == last_input else " not the input token")  # fmt: skip
print(f"last boundary: max |readout - logits| {(readout[-1] - output).abs().max().item():.1e}, the same "
      f"computation. Boundary 0 ranks {first_guess!r} first for {texts[0]!r}:{echo}.")  # fmt: skip


# %% [markdown]
# ## A second round: new IOI prompts, and a second model
#
# Two claims above rest on few prompts: the gradients' agreement with occlusion on the
# `n_attribution` attributed prompts of each behaviour (and the first round's remaining deletion
# prompts), and the contrastive claim on the `n_attribution` IOI prompts, with no replication at
# all. The IOI chapter, on held-out prompts of its own, measured the gradient norm agreeing with
# occlusion far better than this chapter had. So both claims are judged again, against criteria
# committed before this section was written, on IOI prompts no chapter has read (a draw with its
# own seed, any prompt text shared with the chapter's own dropped), and on Gemma-3-270M, to see
# whether the answer is SmolLM2's alone. Only the gradient scores and occlusion are computed here:
# integrated gradients is not judged (above).


# %%
def second_round(lm, prompts: behaviours.ContrastSet, label: str) -> pd.DataFrame:
    """One row per IOI prompt: the gradient scores' Spearman agreement with |occlusion|
    (contrastive), and whether occlusion's top token is a name, plain and contrastive."""
    rows = []
    for i in progress.track(range(len(prompts)), f"{label}: gradients and occlusion"):
        tokens, io, s = prompts.tokens[i], int(prompts.answers[i]), int(prompts.foils[i])
        names = {p for p, t in enumerate(tokens.tolist()) if t in (io, s)}
        row = {"model": label, "prompt": i}
        for contrastive in (False, True):
            frame, _ = attribution.input_attributions(lm, tokens, io, s if contrastive else None, ig_steps=2,
                                                      skip_first=True)  # fmt: skip
            body = frame.iloc[1:-1]  # the first (BOS) and last tokens are never deleted
            top = int(body.loc[body["occlusion"].abs().idxmax(), "position"])
            row["top is a name, " + ("contrastive" if contrastive else "plain")] = top in names
            if contrastive:
                ranks = body[["gradient norm", "gradient x input", "occlusion"]].abs().corr(method="spearman")
                row["gradient norm ρ"] = ranks.loc["gradient norm", "occlusion"]
                row["gradient x input ρ"] = ranks.loc["gradient x input", "occlusion"]
        rows.append(row)
    return pd.DataFrame(rows)


def new_ioi_prompts(lm, n: int) -> behaviours.ContrastSet:
    """n IOI prompts of the second round's draw, none whose text the chapter's own IOI prompts hold."""
    seen = set(ioi.text)
    drawn = behaviours.ioi_prompts(lm.tokenizer, 2 * n, seed=new_ioi_seed)
    keep = torch.tensor([i for i, text in enumerate(drawn.text) if text not in seen][:n])
    if len(keep) < n:
        raise ValueError(f"only {len(keep)} new IOI prompts; ask for fewer")
    return drawn.subset(keep)


new_ioi = new_ioi_prompts(model, n_new_ioi)
second = resid.load(second_model)
second_ioi = new_ioi_prompts(second, n_new_ioi_second)
ledger.check(
    "the second round's SmolLM2 prompts share no text with the chapter's own IOI prompts",
    not set(new_ioi.text) & set(ioi.text), f"{len(new_ioi)} new prompts, {len(ioi)} of the chapter's",
)  # fmt: skip
second_bos = data.leading_bos(second.tokenizer)
ledger.check(
    f"{second_model}: every prompt starts with its BOS token, as the model was trained",
    second_bos is not None and bool((second_ioi.tokens[:, 0] == second_bos).all()), f"BOS id {second_bos}",
)  # fmt: skip
rounds = {model_name: second_round(model, new_ioi, model_name),
          second_model: second_round(second, second_ioi, second_model)}  # fmt: skip
# the third round: every head's direct effect on the logit difference, per new prompt [prompt, head]
new_head_effects, head_names = {}, {}
for lm, prompts, name in ((model, new_ioi, model_name), (second, second_ioi, second_model)):
    new_head_effects[name] = circuits.head_logit_attributions(lm, prompts).flatten(1)
    head_names[name] = [str(h) for h in circuits.all_heads(lm)]
    _, sums = attribution.direct_logit_attribution(lm, prompts.tokens, prompts.answers, prompts.foils)
    ledger.check(
        f"{name}: the components' direct effects sum to the logit difference on the new prompts",
        abs(sums["sum of contributions"] - sums["model logit"]) < 1e-3 * max(1.0, abs(sums["model logit"])),
        f"{sums['sum of contributions']:.4f} against {sums['model logit']:.4f}",
    )  # fmt: skip
del second
round_table = (
    pd.concat(rounds.values()).groupby("model", sort=False).mean(numeric_only=True).drop(columns="prompt")
)
display(round_table.style.format("{:.2f}"))

# %% [markdown]
# ## Checks
#
# The identities and sanity properties asserted along the way (a failing one stops the
# chapter). They are never counted as reproductions. Integrated gradients' completeness is not
# among them: it is an identity of the integral, and its error on SmolLM2 (above) measures the
# numerical integration, which is why IG's token scores are shown but not used for claims.

# %% tags=["checks"]
ledger.checks_table()

# %% [markdown]
# (claims-attribution)=
# ## The Primer's claims, judged against their criteria
#
# Each row: the claim, its source, our estimate with a 95% percentile bootstrap interval over
# the prompts it is computed on (the attributed prompts, the IOI prompts, or the capital
# prompts the model answers), the criterion in `notebooks/criteria/attribution.toml`, and the
# verdict.

# %%
n_resamples = 2000
gradient_vs_occlusion = torch.tensor(
    [
        [a.loc["gradient norm", "occlusion"], a.loc["gradient x input", "occlusion"]]
        for a in per_prompt_agreement
    ]
)  # [attributed prompt, method]


def better_gradient(rows: torch.Tensor) -> float:
    return rows.mean(0).max().item()


occlusion_tops = top_rows[(top_rows.task == "IOI") & (top_rows.method == "occlusion")].pivot(
    index="prompt", columns="contrastive", values="top token is a key token"
)
contrastive_gain = torch.tensor(
    (occlusion_tops[True].astype(float) - occlusion_tops[False].astype(float)).values
)
per_prompt_heads = circuits.head_logit_attributions(model, ioi).flatten(1)  # [IOI prompt, head]


def top10_share(rows: torch.Tensor) -> float:
    mean = rows.mean(0).abs()
    return (mean.topk(10).values.sum() / mean.sum()).item()


# the third round: heads and their signs chosen on the chapter's IOI prompts, the share measured on
# the new ones; on Gemma-3-270M chosen on the first half of its new prompts, measured on the second
half = len(second_ioi) // 2
choices = {model_name: circuits.top_heads_signed(per_prompt_heads),
           second_model: circuits.top_heads_signed(new_head_effects[second_model][:half])}  # fmt: skip
measuring = {model_name: new_head_effects[model_name], second_model: new_head_effects[second_model][half:]}
chosen_heads = {name: [head_names[name][i] for i in chosen.tolist()] for name, (chosen, _) in choices.items()}
for name, names in chosen_heads.items():
    print(f"{name}: the ten heads chosen for the third round: {', '.join(names)}")


lrp_gains = torch.tensor(
    np.stack([areas["LRP"] - areas["gradient x input"], areas["LRP"] - areas["integrated gradients"]], axis=1)
)  # [deletion prompt, method]
measured = {  # criterion id -> (statistic, the prompts' rows, what it is)
    "deletion_discriminates": (
        lambda rows: rows.mean().item(),
        torch.tensor((areas["occlusion"] - areas["random order"]).to_numpy()),
        "Δ area",
    ),
    "lrp_more_faithful": (lambda rows: rows.mean(0).min().item(), lrp_gains, "Δ area"),
    "gradients_disagree_with_occlusion": (better_gradient, gradient_vs_occlusion, "Spearman"),
    "contrastive_isolates_names": (lambda rows: rows.mean().item(), contrastive_gain, "Δ share"),
    "gradients_disagree_heldout": (
        better_gradient,
        torch.tensor(heldout_agreement, dtype=torch.float64),
        "Spearman",
    ),
}
for name, suffix in ((model_name, "new_ioi"), (second_model, "gemma")):
    frame = rounds[name]
    measured[f"gradients_disagree_{suffix}"] = (
        better_gradient,
        torch.tensor(frame[["gradient norm ρ", "gradient x input ρ"]].to_numpy()),
        "Spearman",
    )
    measured[f"contrastive_isolates_names_{suffix}"] = (
        lambda rows: rows.mean().item(),
        torch.tensor((frame["top is a name, contrastive"].astype(float)
                      - frame["top is a name, plain"].astype(float)).to_numpy()),
        "Δ share")  # fmt: skip
    measured[f"few_heads_{suffix}"] = (
        lambda rows, name=name: circuits.signed_share(rows, *choices[name]), measuring[name], "share"
    )
for key in ledger.criteria:
    statistic, rows, what = measured[key]
    ledger.judge(key, stats.bootstrap_statistic(statistic, rows, n_resamples=n_resamples), what)
# not a claim (chosen and measured on the same prompts): the in-sample share, for the takeaways
in_sample_share = top10_share(per_prompt_heads)
ledger.claims_table()

# %% [markdown]
# **Takeaways**, computed from the measurements above.

# %% tags=["prose"]
verdicts, estimates = ledger.verdicts, ledger.estimates
ig_error = convergence["relative error"].iloc[-1]
display(Markdown(
    f"- Integrated gradients' completeness error on SmolLM2 is {ig_error:.0%} at {ig_convergence_steps[-1]} "
    f"steps, where the score jumps by up to {largest_jump:.1f} logits within 0.5% of the path; completeness "
    "itself is exact, so that error is the numerical integration's (on small models the tests hold it to "
    "1%), and IG's token scores are shown but not judged.\n"
    f"- On the chapter's own prompts the better gradient score ranks tokens like deleting them does with a "
    f"mean Spearman of {estimates['gradients_disagree_with_occlusion']:.2f} "
    f"({verdicts['gradients_disagree_with_occlusion']} against 'a poor guide'); the rounds below read it "
    "again on prompts it was not seen on.\n"
    f"- Asking the contrastive question changes how often occlusion's top token is a name by "
    f"{estimates['contrastive_isolates_names']:+.0%} of the IOI prompts "
    f"({verdicts['contrastive_isolates_names']}).\n"
    f"- Chosen and measured on the same {len(ioi)} IOI prompts, ten of {per_prompt_heads.shape[1]} heads "
    f"carry {in_sample_share:.0%} of the heads' |mean| direct effect on the logit difference, a number "
    "shown but not judged: heads picked for a large share on the very prompts that measure it could hardly "
    "fail. The third round below judges it on new prompts.\n"
    f"- On {len(heldout_agreement)} prompts that none of the above was measured on, the better gradient "
    "score "
    f"agrees with occlusion at a mean Spearman of {estimates['gradients_disagree_heldout']:.2f} "
    f"({verdicts['gradients_disagree_heldout']} against 'a poor guide').\n"
    f"- **Second round.** On {len(new_ioi)} new IOI prompts the better gradient score agrees with occlusion "
    f"at {estimates['gradients_disagree_new_ioi']:.2f} ({verdicts['gradients_disagree_new_ioi']}), and on "
    f"{second_model} at {estimates['gradients_disagree_gemma']:.2f} "
    f"({verdicts['gradients_disagree_gemma']}). "
    "Asking the contrastive question changes how often occlusion's top token is a name by "
    f"{estimates['contrastive_isolates_names_new_ioi']:+.0%} of the prompts on {model_name} "
    f"({verdicts['contrastive_isolates_names_new_ioi']}) and "
    f"{estimates['contrastive_isolates_names_gemma']:+.0%} on {second_model} "
    f"({verdicts['contrastive_isolates_names_gemma']}). Only these rows, and the first round's, count as "
    "a replication: the rows above them had been seen before their criteria were written.\n"
    f"- **Third round.** The ten heads with the largest direct effect on the chapter's prompts carry "
    f"{estimates['few_heads_new_ioi']:.0%} of all heads' signed direct effect on the {len(new_ioi)} new "
    f"prompts ({verdicts['few_heads_new_ioi']}: 'a few heads carry most of it'); on {second_model}, chosen "
    f"on half its new prompts and measured on the other half, {estimates['few_heads_gemma']:.0%} "
    f"({verdicts['few_heads_gemma']}). Direct effect is not causal effect: the patching chapter picks its "
    "late head by resampling, on prompts of its own.\n"
    f"- The capital is the logit lens's top-1 for half the prompts from boundary {first_top1} of "
    f"{model.cfg.n_layers}, where the lens is the model itself: that cannot test when the answer forms, so "
    "the claim is judged in the [Lenses](lenses) chapter, with a tuned lens and before the last block."
))  # fmt: skip

# %% tags=["record"]
results = ledger.results(
    quick=quick,
    model=model_name,
    second_model=second_model,
    validation=validation.to_dict(orient="records"),
    ig_max_relative_error=float(ig_error),
    rank_agreement=agreement.round(4).to_dict(),
    top_heads_dla=top_components.to_dict(orient="records"),
    top10_share_in_sample=in_sample_share,
    third_round_heads=chosen_heads,
    logit_lens_first_top1=int(first_top1) if not np.isnan(first_top1) else None,
    second_round=pd.concat(rounds.values()).to_dict(orient="records"),
)
headline = (
    f"On new IOI prompts the better gradient score agrees with occlusion at a mean Spearman of "
    f"{estimates['gradients_disagree_new_ioi']:.2f} "
    f"({second_model}: {estimates['gradients_disagree_gemma']:.2f}); "
    f"LRP's deletion area exceeds the better gradient method's by {estimates['lrp_more_faithful']:+.2f}."
)
book.save_results(results, rerun={"model_name": model_name, "second_model": second_model, "n_ioi": n_ioi,
                                  "seed": seed}, headline=headline)  # fmt: skip
