"""Attribution: which input tokens, and which components, a prediction rests on.

Input attribution (the Primer, section 3.1): gradient norm, gradient x input, integrated
gradients (through Captum), occlusion by deleting a token, and their contrastive forms, which
explain ``target`` rather than ``foil``. Component attribution (section 3.2): the direct logit
attribution of every head, MLP and the embedding, and the logit lens over layers.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import torch
from torch import Tensor

from resid.model import Transformer
from resid.model.basis import read, write
from resid.model.cache import act_name
from resid.stats.metrics import LogitDiff


def prediction_score(
    model: Transformer, tokens: Tensor, target: int, foil: int | None = None
) -> Callable[[Tensor], Tensor]:
    """f(embeddings) = the last position's logit of ``target`` (minus ``foil``'s if given),
    with the token embeddings of ``tokens`` (``[1, pos]``) replaced by the argument
    ``[batch, pos, d_model]``, as attribution methods need."""

    def score(embeddings: Tensor) -> Tensor:
        with model.hooks([("hook_embed", lambda _, hook: embeddings)]):
            logits = model(tokens, logits_to_keep=1)[:, -1].float()
        return logits[:, target] - (0.0 if foil is None else logits[:, foil])

    return score


@torch.no_grad()
def mean_embedding_baseline(model: Transformer, tokens: Tensor, keep_first: bool = False) -> Tensor:
    """Integrated gradients' baseline: the input embeddings of ``tokens`` (``[1, pos]``) with the
    mean token embedding in place of each token's, positions kept: ``[1, pos, d_model]``.
    ``keep_first`` leaves the first position (a BOS token) as it is."""
    embeddings = model.embed_tokens(tokens)
    # the token part of the embedding, scaled as embed_tokens scales it (Gemma multiplies by sqrt(d))
    average = (model.embed.weight.mean(0) - model.embed(tokens)) * model.cfg.embed_scale
    baseline = embeddings + write(average, model.R_embed)
    if keep_first:
        baseline[:, 0] = embeddings[:, 0]
    return baseline


def input_attributions(
    model: Transformer,
    tokens: Tensor,
    target: int,
    foil: int | None = None,
    ig_steps: int = 64,
    skip_first: bool = False,
) -> tuple[pd.DataFrame, dict]:
    """One row per input token with its score under every method; and a check of integrated
    gradients' completeness (its attributions sum to f(x) - f(baseline)).

    The baseline puts the mean token embedding at every position (positions kept). The zero
    vector, the textbook choice, is a poor one here: a normalised model is scale-invariant, so
    along the path from zero f jumps within a sliver near zero that 64 steps never sample.

    ``tokens`` is ``[pos]`` or ``[1, pos]``. Occlusion deletes the token and reruns the model;
    it is undefined for the last token, whose position makes the prediction. ``skip_first``
    leaves the first token (a BOS token) out: its baseline is itself and it is never deleted.
    """
    # captum is imported here: at import time it loads tqdm's notebook bar, which warns in a
    # chapter without ipywidgets, and nothing else in this module needs it
    from captum.attr import InputXGradient, IntegratedGradients, Saliency

    tokens = tokens.reshape(1, -1)
    score = prediction_score(model, tokens, target, foil)
    with torch.no_grad():
        embeddings = model.embed_tokens(tokens).detach()
    if model.embed_ln is not None:
        raise ValueError("input attribution is written for decoders without an embedding norm")
    baseline = mean_embedding_baseline(model, tokens, skip_first)
    embeddings.requires_grad_()
    gradient = Saliency(score).attribute(embeddings, abs=False)
    grad_x_input = InputXGradient(score).attribute(embeddings)
    ig, delta = IntegratedGradients(score).attribute(
        embeddings,
        baselines=baseline,
        n_steps=ig_steps,
        internal_batch_size=min(ig_steps, 128),
        return_convergence_delta=True,
    )
    with torch.no_grad():
        full, empty = score(embeddings).item(), score(baseline).item()
        # every deletion leaves a prompt one token shorter, so all of them run as one batch
        deletable = list(range(1 if skip_first else 0, tokens.shape[1] - 1))
        occlusion = [float("nan")] * tokens.shape[1]
        if deletable:
            shorter = torch.stack([torch.cat([tokens[0, :i], tokens[0, i + 1 :]]) for i in deletable])
            logits = model(shorter, logits_to_keep=1)[:, -1].float()  # [deleted position, vocab]
            deleted = logits[:, target] - (0.0 if foil is None else logits[:, foil])
            for i, value in zip(deletable, deleted.tolist(), strict=True):
                occlusion[i] = full - value
    frame = pd.DataFrame(
        {
            "position": range(tokens.shape[1]),
            "token": tokens[0].tolist(),
            "gradient norm": gradient[0].norm(dim=-1).tolist(),
            "gradient x input": grad_x_input[0].sum(-1).tolist(),
            "integrated gradients": ig[0].sum(-1).tolist(),
            "occlusion": occlusion,
        }
    )
    completeness = {
        "f(x)": full,
        "f(baseline)": empty,
        "sum of IG": ig.sum().item(),
        "relative error": abs(delta.item()) / max(abs(full - empty), 1e-12),
    }
    return frame, completeness


def smoothgrad(
    model: Transformer,
    tokens: Tensor,
    target: int,
    foil: int | None = None,
    n_samples: int = 32,
    noise: float = 0.15,
    seed: int = 0,
) -> Tensor:
    """SmoothGrad (Smilkov et al. 2017): the gradient norm of each input token, averaged over
    ``n_samples`` copies of the input embeddings with Gaussian noise of ``noise`` times their
    standard deviation added. ``[pos]``; the plain gradient's noise averages out."""
    tokens = tokens.reshape(1, -1)
    score = prediction_score(model, tokens, target, foil)
    with torch.no_grad():
        embeddings = model.embed_tokens(tokens)
    generator = torch.Generator().manual_seed(seed)
    noisy = embeddings + torch.randn((n_samples, *embeddings.shape[1:]), generator=generator).to(
        embeddings
    ) * (noise * embeddings.std())
    noisy.requires_grad_()
    (gradient,) = torch.autograd.grad(score(noisy).sum(), noisy)
    return gradient.norm(dim=-1).mean(0).detach()


@torch.no_grad()
def value_weighted_attention(model: Transformer, tokens: Tensor) -> Tensor:
    """Attention weighted by what it moves (Kobayashi et al. 2020): for every layer, how much
    of what position ``k`` holds reaches position ``q`` through attention, as the norm of
    ``sum_h pattern_h[q, k] * f_h(x_k)``, where ``f_h`` is head h's value and output map.
    ``[layer, batch, query, key]``. Unlike the raw pattern, a head that attends to a token
    whose value vector is near zero (an attention sink) scores near zero."""
    cfg = model.cfg
    names = [act_name(hook, i) for i in range(cfg.n_layers) for hook in ("pattern", "v")]
    _, cache = model.run_with_cache(tokens, names, logits_to_keep=1)
    maps = []
    for layer, block in enumerate(model.blocks):
        v = cache[act_name("v", layer)]  # [batch, key, kv_head, d_head]
        v = v.repeat_interleave(cfg.n_heads // v.shape[2], dim=2)
        moved = write(block.attn.head_results(v), block.R_attn_out)  # [batch, key, head, d_model]
        pattern = cache[act_name("pattern", layer)]  # [batch, head, query, key]
        mixed = torch.einsum("bhqk,bkhd->bqkd", pattern, moved)
        maps.append(mixed.float().norm(dim=-1))
    return torch.stack(maps)


def attention_rollout(maps: Tensor) -> Tensor:
    """Abnar & Zuidema's rollout of per-layer maps ``[layer, batch, query, key]``: each row
    normalised to sum to one with the residual connection counted as an equal share of
    attention to itself, then composed over layers. ``[batch, query, key]``: how much of each
    input position reaches each position by the end."""
    n = maps.shape[-1]
    identity = torch.eye(n, dtype=maps.dtype)
    total = identity.expand(maps.shape[1], n, n)
    for layer_map in maps:
        rows = layer_map / layer_map.sum(-1, keepdim=True).clamp_min(1e-12)
        total = (0.5 * rows + 0.5 * identity) @ total
    return total


# --- direct logit attribution and the logit lens ---


@torch.no_grad()
def residual_components(model: Transformer, tokens: Tensor, position: int = -1) -> tuple[list[str], Tensor]:
    """Everything written into the residual stream at ``position``: the embedding, every head,
    every attention output bias and every MLP, as ``[component, batch, d_model]``.

    They sum to the final residual (before the final norm): the decomposition behind the
    direct logit attribution. Only for pre-norm models, where the residual is a plain sum.
    """
    cfg = model.cfg
    names = ["hook_embed"] + [act_name("z", i) for i in range(cfg.n_layers)]
    names += [] if cfg.attn_only else [act_name("mlp_out", i) for i in range(cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names, logits_to_keep=1)
    heads, head_labels = cache.stack_head_results(pos_slice=position, return_labels=True)
    labels, parts = ["embed"], [cache["hook_embed"][:, position]]
    for layer, block in enumerate(model.blocks):
        these = slice(layer * cfg.n_heads, (layer + 1) * cfg.n_heads)
        labels += head_labels[these]
        parts += list(heads[these])
        if block.attn.W_O.bias is not None:
            labels.append(f"L{layer} attn bias")
            parts.append(write(block.attn.W_O.bias, block.R_attn_out).expand_as(parts[0]))
        if block.mlp is not None:
            labels.append(f"L{layer} MLP")
            parts.append(cache["mlp_out", layer][:, position])
    return labels, torch.stack(parts)


def frozen_final_norm(model: Transformer, final_resid: Tensor) -> Callable[[Tensor], Tensor]:
    """The final norm as a linear map, its scale frozen at ``final_resid``'s: applied to each
    component, the images sum to the normalised residual (minus the norm's bias)."""
    norm = model.ln_final
    scale = norm.scale(final_resid)
    return lambda component: norm.linear(component, scale).float()


@torch.no_grad()
def component_attributions(
    model: Transformer, tokens: Tensor, targets: Tensor, foils: Tensor | None = None
) -> tuple[list[str], Tensor, Tensor]:
    """Each component's direct contribution to the last position's logit of ``targets[b]``
    (minus ``foils[b]``), per prompt: labels, ``[component, batch]``, and the bias term
    ``[batch]`` of the final norm and the unembedding (zero without biases), which together sum
    to the logit (difference)."""
    labels, parts = residual_components(model, tokens)
    norm = frozen_final_norm(model, parts.sum(0))
    unembed = model.unembed.weight.float()
    direction = unembed[targets] - (0 if foils is None else unembed[foils])  # [batch, d]
    contributions = torch.einsum("cbd,bd->cb", read(norm(parts), model.R_unembed), direction)
    bias = model.ln_final.bias
    bias_term = torch.zeros(len(targets), device=direction.device)
    if bias is not None:
        bias_term = (read(bias.float(), model.R_unembed) * direction).sum(-1)
    if model.unembed.bias is not None:
        unembed_bias = model.unembed.bias.float()
        bias_term = bias_term + unembed_bias[targets] - (0 if foils is None else unembed_bias[foils])
    return labels, contributions, bias_term


@torch.no_grad()
def direct_logit_attribution(
    model: Transformer, tokens: Tensor, targets: Tensor, foils: Tensor | None = None
) -> tuple[pd.DataFrame, dict]:
    """Each component's direct contribution to the last position's logit of ``targets[b]``
    (minus ``foils[b]``), averaged over the batch; and a check that the contributions, with the
    final norm's bias, sum to the model's own logit (difference)."""
    labels, contributions, bias_term = component_attributions(model, tokens, targets, foils)
    logits = model(tokens, logits_to_keep=1)[:, -1].float()
    actual = logits.gather(1, targets[:, None])[:, 0] if foils is None else LogitDiff(targets, foils)(logits)
    frame = pd.DataFrame({"component": labels, "dla": contributions.mean(1).tolist()})
    check = {
        "sum of contributions": (contributions.sum(0) + bias_term).mean().item(),
        "model logit": actual.mean().item(),
    }
    return frame, check


@torch.no_grad()
def logit_lens(model: Transformer, tokens: Tensor, targets: Tensor, per_prompt: bool = False) -> pd.DataFrame:
    """At every layer boundary, the last position's residual read out through the final norm
    and unembedding: the probability and rank of ``targets`` and whether it is the top-1, as the
    mean over the batch, or with ``per_prompt`` one row per (layer, prompt)."""
    _, cache = model.run_with_cache(tokens, model.resid_names(), logits_to_keep=1)
    rows = []
    for layer, name in enumerate(model.resid_names()):
        logits = model.to_logits(cache[name][:, -1]).float()
        target_logit = logits.gather(1, targets[:, None])[:, 0]
        rows.append(pd.DataFrame({
            "layer": layer, "prompt": range(len(targets)),
            "probability": logits.softmax(-1).gather(1, targets[:, None])[:, 0].numpy(),
            "rank": (logits > target_logit[:, None]).sum(1).float().numpy(),
            "top-1 accuracy": (logits.argmax(-1) == targets).float().numpy(),
        }))  # fmt: skip
    frame = pd.concat(rows, ignore_index=True)
    return frame if per_prompt else frame.groupby("layer").mean().drop(columns="prompt").reset_index()
