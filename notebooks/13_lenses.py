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
# # Lenses: when does the answer appear?
#
# :::{admonition} What this chapter found, and how to rerun it
# :class: tip
# **Result:** {glue:md}`chapter_result`
#
# **Rerun:** {glue:md}`rerun_command`
#
# **Time here** (2 CPU cores, measured by this execution): {glue:text}`rerun_cached` with the
# models converted and the lenses' measurements read from their records in `book/runs` (nothing
# trained); {glue:text}`rerun_cold` from a cold cache, the lenses trained again (`RETRAIN=1`).
#
# **Executed** {glue:text}`executed_on`, with `src/resid` at commit
# {glue:text}`executed_commit`.
# :::
#
# **This chapter reproduces** the tuned lens of {cite:t}`belrose2023tuned` against the logit lens
# {cite:p}`nostalgebraist2020logitlens`, two of the vocabulary-space decoders in
# {cite:t}`ferrando2024primer` (section 4), on SmolLM2-135M and Gemma-3-270M. Each claim is
# judged against a criterion in `notebooks/criteria/lenses.toml`, committed before the chapter
# first ran, with a bootstrap interval over held-out text windows or over prompts.
#
# **The question.** The residual stream after block $l$ is a partial sum of the writes that
# make the prediction. Read it out early and you see the prediction forming. The *logit lens*
# reads boundary $l$ exactly as the model reads its last one, through the final norm and the
# unembedding: $\text{LogitLens}(h_l) = W_U\,\text{norm}(h_l)$. It assumes the later blocks
# only add to what is there, in the basis the unembedding reads, and it is often far off early
# (the Attribution chapter found the capital decodable on SmolLM2 only at the last boundary,
# where the lens *is* the model, so that finding says nothing).
#
# The *tuned lens* drops the assumption: each boundary gets an affine translator learned on
# text, $\text{TunedLens}_l(h_l) = W_U\,\text{norm}(h_l + A_l h_l + b_l)$, trained so that its
# distribution matches the model's final one (the KL divergence from the final distribution,
# averaged over positions). Belrose et al. report that it reads every layer of every model they
# tried closer to the output than the logit lens does, and that it is the better guide to when
# a prediction forms. We ask both on two small models, and then ask the Primer's question with
# it: does the answer appear only in the later layers?
#
# **Two economies** (`resid.lenses`), stated where they act: the translators start from the
# least-squares map to the final residual (the linear shortcut of
# {cite:t}`din2023jump`) before the KL training, and the training KL is taken over the tokens
# the final distribution ranks in its top `top_k` somewhere in the training text, about a tenth
# of SmolLM2's vocabulary. Every KL this chapter reports is over the whole vocabulary.

# %% tags=["parameters"]
model_name = "smollm2-135m"  # [model] the model every claim is judged on
second_model = "gemma3-270m"  # [model] the second model of the KL claim
corpus_name = "pydoc"  # [corpus] text for training the lenses and for their held-out KL
n_train_windows = 128  # [> 1] training windows of the lens
n_eval_windows = 40  # [> 2] held-out windows for the KL, drawn after the training ones
window_length = 128  # [> 8] tokens per window
eval_stride = 8  # [> 0] the KL is read at every eval_stride-th position of a window
lens_steps = 80  # [> 0] Adam steps after the least-squares start
lens_lr = 1e-3  # [> 0] their learning rate
top_k = 16  # [> 0] the training vocabulary: the final distribution's top_k at each training position
n_ioi = 120  # [> 2] IOI prompts (those the model answers right are kept)
n_resamples = 2000  # [> 99] bootstrap resamples
seed = 0  # [min 0] which windows of the corpus are read, and which IOI prompts are drawn
quick = False  # a small run for CI

# %% tags=["setup"]
import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import Markdown, display

import resid
from resid import behaviours, book, data, exercises, lenses, stats

ledger = book.start_chapter("lenses", seed)  # criteria, claims and checks; theme and seed
if quick:
    n_train_windows, n_eval_windows, window_length, lens_steps, n_ioi, n_resamples = 8, 4, 32, 3, 24, 200
models = {name: resid.load(name) for name in (model_name, second_model)}
for name, m in models.items():
    print(f"{name}: {m.cfg.n_layers} blocks, d_model {m.cfg.d_model}, vocabulary {m.cfg.vocab_size:,}")

# %% [markdown]
# ## Training a tuned lens
#
# For each model: `n_train_windows` windows of `window_length` tokens of the Python
# documentation train the translators; `n_eval_windows` further windows of the same draw,
# which the training never sees, measure them. Each lens is trained once and cached; its record
# (configuration, history, where and how long it trained) is kept with the book's run records,
# and so is every measurement this chapter takes with it (its KL on the held-out windows, its
# top-1 on the prompts below): a re-execution reads them there and trains nothing, while the
# translators themselves (40 MB each in float32) stay in the cache of the machine that trained them.

# %%
fits, train_of, eval_windows, histories = {}, {}, {}, []
for name, m in models.items():
    bos = data.leading_bos(m.tokenizer)
    ids = data.token_ids(data.corpus(corpus_name), m.tokenizer)
    fit = lenses.LensFit(
        name, corpus_name, n_train_windows, window_length, seed, lens_steps, lr=lens_lr, top_k=top_k
    )
    train_windows = data.windows(ids, window_length, n_train_windows, seed=seed, bos=bos)
    eval_windows[name] = data.windows(
        ids, window_length, n_eval_windows, seed=seed, skip=n_train_windows, bos=bos
    )
    record = lenses.lens_record(m, train_windows, fit)  # trains the lens only where no record is
    fits[name], train_of[name] = fit, train_windows
    histories += [{"model": name, **row} for row in record["history"]]
    print(f"{name}: trained in {record['seconds']:.0f} s on {record['machine']}; training vocabulary "
          f"{record['history'][0]['vocabulary']:,} tokens; {len(ids):,} tokens of text")  # fmt: skip
histories = pd.DataFrame(histories)

# %% tags=["plot"] alt="Line plot of the tuned lens's mean KL over boundaries during its training, from the least-squares start, one line per model."
fig, ax = plt.subplots(figsize=(6, 3.2))
for name, rows in histories.groupby("model"):
    ax.plot(rows.step, rows.kl, label=name)
ax.set(xlabel="Adam step (0: the least-squares start)", ylabel="mean KL over boundaries (nats)",
       title="training the tuned lens (training vocabulary)")  # fmt: skip
ax.legend()
plt.tight_layout()
plt.show()

# %%
for name, rows in histories.groupby("model"):
    if lens_steps < 20:  # too few steps to tell a trend from the batches' noise (the quick run)
        continue
    start, end = rows.kl.iloc[:5].mean(), rows.kl.iloc[-5:].mean()
    ledger.check(
        f"{name}: the KL training lowers the training KL below its least-squares start",
        end < start, f"first five steps {start:.3f}, last five {end:.3f} nats",
    )  # fmt: skip

# %% [markdown]
# ### Exercise 13.1: the KL a lens is judged by
#
# *Coding · difficulty 1 of 3 · about 10 minutes*
#
# Write `kl_from_final(final_logits, lens_logits)`: per position (the last axis is the
# vocabulary), $\text{KL}(p\,\|\,q) = \sum_v p_v (\log p_v - \log q_v)$ with $p$ the model's
# final distribution and $q$ the lens's. Which distribution weighs the log-ratio, and why is
# that the right one for a lens?


# %% tags=["starter"]
def kl_from_final(final_logits: torch.Tensor, lens_logits: torch.Tensor) -> torch.Tensor:
    """[...]: KL(final || lens) in nats at every position."""
    raise NotImplementedError  # your code here


exercises.check("13.1", kl_from_final)


# %% tags=["hide-cell", "solution"]
def kl_from_final(final_logits: torch.Tensor, lens_logits: torch.Tensor) -> torch.Tensor:
    final_logp, lens_logp = final_logits.log_softmax(-1), lens_logits.log_softmax(-1)
    return (final_logp.exp() * (final_logp - lens_logp)).sum(-1)


assert exercises.check("13.1", kl_from_final)

# %% [markdown]
# ### Exercise 13.2: a translator by least squares
#
# *Coding · difficulty 2 of 3 · about 15 minutes*
#
# The training starts each translator at the least-squares fit of $h_l + A_l h_l + b_l$ to the
# final residual $h_L$. Write `fit_translator(h, final)` (both `[n_tokens, d_model]`) returning
# `(A, b)`. Hint: append a column of ones to $h$ and regress $h_L - h_l$ on it with
# `torch.linalg.lstsq`; solve in float64 (the residual's outlier dimensions make it badly
# conditioned).


# %% tags=["starter"]
def fit_translator(h: torch.Tensor, final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(A [d_model, d_model], b [d_model]) minimising || h + h @ A + b - final ||^2."""
    raise NotImplementedError  # your code here


exercises.check("13.2", fit_translator)


# %% tags=["hide-cell", "solution"]
def fit_translator(h: torch.Tensor, final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    inputs = torch.cat([h, torch.ones(len(h), 1)], 1).double()  # [n_tokens, d_model + 1]
    solution = torch.linalg.lstsq(inputs, (final - h).double()).solution  # [d_model + 1, d_model]
    return solution[:-1].float(), solution[-1].float()


assert exercises.check("13.2", fit_translator)

# %% [markdown]
# ## How far each lens reads from the output
#
# At every boundary, the KL divergence from the model's final distribution to each lens's,
# over the whole vocabulary, at every `eval_stride`-th position of the held-out windows; one
# value per window.

# %%
kl = {}  # (model, lens) -> [boundary, window]
for name, m in models.items():
    kl[name, "logit lens"] = lenses.kl_to_final(m, eval_windows[name], stride=eval_stride)
    # the tuned lens's, from its record where the record holds it (else measured and filed there)
    kl[name, "tuned lens"] = lenses.measure(m, train_of[name], fits[name], lenses.kl_to_final,
                                            tokens=eval_windows[name], stride=eval_stride)  # fmt: skip
    for lens_name in ("logit lens", "tuned lens"):
        last = kl[name, lens_name][-1].abs().max().item()
        ledger.check(
            f"{name}: the {lens_name} at the last boundary is the model itself", last < 1e-3,
            f"KL {last:.1e}",
        )  # fmt: skip
kl_table = pd.DataFrame([
    {"model": name, "lens": lens_name, "boundary": b, "KL (nats)": values[b].mean().item()}
    for (name, lens_name), values in kl.items() for b in range(values.shape[0])
])  # fmt: skip

# %% [markdown]
# ### Exercise 13.4: where the logit lens is farthest off
#
# *Prediction · difficulty 1 of 3 · about 10 minutes*
#
# **Predict** first: at which boundary is the logit lens's mean KL to SmolLM2's output largest?
# (Exercise 6.5 read boundary 0 through the logit lens.) Then find it in
# `kl[model_name, "logit lens"]` (`[boundary, window]`) and check.

# %% tags=["starter"]
exercises.predict("13.4", ...)  # a boundary, 0 to 30
farthest = ...  # from kl[model_name, "logit lens"]
exercises.check("13.4", farthest, logit_kl=kl[model_name, "logit lens"])

# %% tags=["hide-cell", "solution"]
# A guess before looking: the middle, where the residual is furthest from both ends' bases.
exercises.predict("13.4", 15)
farthest = int(kl[model_name, "logit lens"].mean(1).argmax())
assert exercises.check("13.4", farthest, logit_kl=kl[model_name, "logit lens"])

# %% tags=["plot"] alt="Two panels, SmolLM2 and Gemma-3-270M, of the KL divergence from each lens to the model's output at every layer boundary before the last (where both are the output), logit lens against tuned lens, on a log scale."
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
for ax, name in zip(axes, models, strict=True):
    for lens_name, color in (("logit lens", "C0"), ("tuned lens", "C1")):
        values = kl[name, lens_name][:-1]  # the last boundary is the output itself: KL 0, off a log axis
        mean, low, high = stats.bootstrap(values.T, n_resamples=n_resamples)
        ax.plot(range(len(mean)), mean, marker=".", color=color, label=lens_name)
        ax.fill_between(range(len(mean)), low, high, color=color, alpha=0.25)
    ax.set(
        yscale="log", xlabel="layer boundary (0 = embedding)", ylabel="KL to the output (nats)", title=name
    )
    ax.legend()
plt.tight_layout()
plt.show()

# %%
(kl_table.pivot_table(index=["model", "boundary"], columns="lens", values="KL (nats)")
 .groupby("model").describe().T.round(3))  # fmt: skip

# %% [markdown]
# ## When does the answer decode?
#
# On SmolLM2's capital prompts ("The capital of France is") and IOI prompts ("When Mary and
# John went to the store, John gave a drink to"), those the model answers right: at every
# boundary, is the answer each lens's top-1 at the last position? A prompt's *first decoding
# boundary* is the first boundary from which the answer stays the top-1 through to the output.

# %%
model = models[model_name]
tokenizer = model.tokenizer
L = model.cfg.n_layers
capital_set = behaviours.capital_prompts(tokenizer)
ioi = behaviours.ioi_prompts(tokenizer, n_ioi, seed=seed)
tasks = {}
for task, tokens, answers in (("capital", capital_set.tokens, capital_set.answers),
                              ("IOI", ioi.tokens, ioi.answers)):  # fmt: skip
    with torch.no_grad():
        right = model(tokens)[:, -1].argmax(-1) == answers
    top1 = {"logit lens": lenses.top1_by_boundary(model, tokens[right], answers[right]),
            "tuned lens": lenses.measure(model, train_of[model_name], fits[model_name],
                                         lenses.top1_by_boundary, tokens=tokens[right],
                                         answers=answers[right])}  # fmt: skip
    first = {lens_name: lenses.first_decoding(table) for lens_name, table in top1.items()}
    tasks[task] = {"top1": top1, "first": first, "n": int(right.sum()), "of": len(answers)}
    print(f"{task}: {int(right.sum())} of {len(answers)} prompts answered right")
    ledger.check(
        f"{task}: every prompt kept decodes at the last boundary with both lenses (there, the model)",
        all(bool((f <= L).all()) for f in first.values()), f"{int(right.sum())} prompts",
    )  # fmt: skip

# %% tags=["plot"] alt="Two panels, capital prompts and IOI prompts: the share of prompts whose answer is each lens's top-1 at every layer boundary, and (dashed) the share from which it stays top-1 to the end."
fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
for ax, (task, found) in zip(axes, tasks.items(), strict=True):
    for lens_name, color in (("logit lens", "C0"), ("tuned lens", "C1")):
        ax.plot(
            found["top1"][lens_name].float().mean(1), marker=".", color=color, label=f"{lens_name}: top-1"
        )
        decoded = (found["first"][lens_name][None] <= torch.arange(L + 1)[:, None]).float().mean(1)
        ax.plot(decoded, color=color, linestyle="--", label=f"{lens_name}: decoded for good")
    ax.set(
        xlabel="layer boundary",
        ylabel="share of prompts",
        title=f"{task} ({found['n']} prompts)",
        ylim=(0, 1.02),
    )
    ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ### Exercise 13.3: where the answer stays on top
#
# *Predict, then code and check · difficulty 2 of 3 · about 15 minutes*
#
# **Predict** first: what share of the capital prompts does the tuned lens decode before the
# last block (first decoding boundary below 30)? Then write `first_decoding(top1)`: from a
# `[boundary, prompt]` table of booleans (the answer is the top-1 there), the first boundary
# from which every later entry is true, and `n_boundaries` where even the last is false.

# %% tags=["starter"]
exercises.predict("13.3", ...)  # a share, 0 to 1


def first_decoding(top1: torch.Tensor) -> torch.Tensor:
    """[prompt]: the first boundary from which the answer stays the top-1 to the end."""
    raise NotImplementedError  # your code here


exercises.check("13.3", first_decoding, top1=tasks["capital"]["top1"]["tuned lens"])

# %% tags=["hide-cell", "solution"]
# A guess before looking: the capital is a fact recalled in the middle blocks, so most prompts.
exercises.predict("13.3", 0.8)


def first_decoding(top1: torch.Tensor) -> torch.Tensor:
    stays = top1.flip(0).int().cumprod(0).flip(0).bool()  # [boundary, prompt]: true here and after
    return torch.where(stays.any(0), top1.shape[0] - stays.sum(0), top1.shape[0])


assert exercises.check("13.3", first_decoding, top1=tasks["capital"]["top1"]["tuned lens"])

# %%
pd.DataFrame([
    {"task": task, "lens": lens_name, "prompts": found["n"],
     "decoded before the last block": (first < L).float().mean().item(),
     "mean first decoding boundary": first.float().mean().item(),
     "median": first.float().median().item()}
    for task, found in tasks.items() for lens_name, first in found["first"].items()
]).style.format(precision=2).hide(axis="index")  # fmt: skip

# %% [markdown]
# ## Checks
#
# The identities and sanity properties asserted along the way (a failing one stops the
# chapter). They are never counted as reproductions.

# %% tags=["checks"]
ledger.checks_table()

# %% [markdown]
# (claims-lenses)=
# ## The claims, judged against their criteria
#
# KL rows: a percentile bootstrap over held-out windows, the minimum over boundaries recomputed
# in every resample. Decoding rows: a percentile bootstrap over prompts. A "late" row is judged
# only where its "before the last block" row is reproduced (the criterion says why); otherwise
# it is inconclusive by rule.

# %%
for key, name in (("tuned_closer", model_name), ("tuned_closer_gemma", second_model)):
    gap = (kl[name, "logit lens"] - kl[name, "tuned lens"])[:-1].T  # [window, boundary before the last]
    smallest = stats.bootstrap_statistic(lambda g: g.mean(0).min().item(), gap, n_resamples=n_resamples)
    weakest = int(gap.mean(0).argmin())
    ledger.judge(key, smallest, ours=f"smallest gap {smallest.text()} nats, at boundary {weakest}")
for task, prefix in (("capital", "capital"), ("IOI", "ioi")):
    first = tasks[task]["first"]
    before = (first["tuned lens"] < L).double()
    decoded_early = stats.bootstrap(before, n_resamples=n_resamples).item()
    row = ledger.judge(f"{prefix}_before_last", decoded_early,
                       ours=f"{decoded_early.text(fmt='.0%')} of {len(before)} prompts")  # fmt: skip
    earlier = (first["logit lens"] - first["tuned lens"]).double()
    sooner = stats.bootstrap(earlier, n_resamples=n_resamples).item()
    ledger.judge(f"{prefix}_tuned_earlier", sooner, ours=f"{sooner.text(fmt='+.1f')} boundaries")
    share = stats.bootstrap(first["tuned lens"].double() / L, n_resamples=n_resamples).item()
    ours = f"{share.text(fmt='.2f')} of the depth"
    if row["verdict"] != "reproduced":  # the criterion's rule: nothing decodes early enough to judge
        ours += f" (not judged: {prefix}_before_last is {row['verdict']})"
        share = stats.Interval(share.estimate, float("nan"), float("nan"))
    ledger.judge(f"{prefix}_late", share, ours=ours)
ledger.claims_table()

# %% [markdown]
# **Takeaways**, computed from the measurements above.

# %% tags=["prose"]
verdicts, estimates = ledger.verdicts, ledger.estimates
mean_kl = kl_table.groupby(["model", "lens"])["KL (nats)"].mean()
lines = [
    f"- **Closer everywhere?** Averaged over boundaries, the logit lens reads SmolLM2 "
    f"{mean_kl[model_name, 'logit lens']:.2f} nats from its output and the tuned lens "
    f"{mean_kl[model_name, 'tuned lens']:.2f}; the smallest per-boundary gap is "
    f"{estimates['tuned_closer']:.3g} nats ({verdicts['tuned_closer']}). On {second_model}: "
    f"{mean_kl[second_model, 'logit lens']:.2f} against {mean_kl[second_model, 'tuned lens']:.2f}, "
    "smallest gap "
    f"{estimates['tuned_closer_gemma']:.3g} ({verdicts['tuned_closer_gemma']})."
]
for task, prefix in (("capital", "capital"), ("IOI", "ioi")):
    first = tasks[task]["first"]
    lines.append(
        f"- **{task}.** The tuned lens decodes the answer before the last block on "
        f"{estimates[f'{prefix}_before_last']:.0%} of {tasks[task]['n']} prompts "
        f"({verdicts[f'{prefix}_before_last']}; the logit lens on "
        f"{(first['logit lens'] < L).float().mean():.0%}), "
        f"{estimates[f'{prefix}_tuned_earlier']:+.1f} boundaries earlier than the logit lens on average "
        f"({verdicts[f'{prefix}_tuned_earlier']}); its mean first decoding boundary is "
        f"{estimates[f'{prefix}_late']:.2f} of the depth ({verdicts[f'{prefix}_late']} against 'only in the "
        "later layers')."
    )
display(Markdown("\n".join(lines)))  # fmt: skip

# %% tags=["record"]
results = ledger.results(
    quick=quick,
    models=list(models),
    fits={name: {"key": fit.key(), **vars(fit)} for name, fit in fits.items()},
    kl=kl_table.to_dict("records"),
    decoding={
        task: {lens_name: first.tolist() for lens_name, first in found["first"].items()}
        for task, found in tasks.items()
    },
)
tuned, logit = mean_kl[model_name, "tuned lens"], mean_kl[model_name, "logit lens"]
tuned_second, logit_second = mean_kl[second_model, "tuned lens"], mean_kl[second_model, "logit lens"]
headline = (
    f"Averaged over boundaries the tuned lens reads {model_name} {tuned:.2f} nats from its output where "
    f"the logit lens reads {logit:.2f} ({second_model}: {tuned_second:.2f} against {logit_second:.2f}), "
    f"and it decodes the capital and the indirect object {estimates['capital_tuned_earlier']:.1f} and "
    f"{estimates['ioi_tuned_earlier']:.1f} boundaries earlier than the logit lens."
)
book.save_results(
    results, rerun={"model_name": model_name, "second_model": second_model, "seed": seed}, headline=headline
)
