"""What a forward pass reads out besides its logits: attention patterns, the previous-token,
duplicate and induction scores they give, and next-token losses at every position.

Training logs these (the induction bump of a model trained on repeated sequences) and so do the
tools that take heads apart (``resid.tools.heads``), which is why they live in the model layer.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .cache import act_name
from .transformer import Transformer


@torch.no_grad()
def attention_patterns(model: Transformer, tokens: Tensor) -> Tensor:
    """Every head's attention pattern: ``[layer, batch, head, query, key]``."""
    names = [act_name("pattern", i) for i in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names, logits_to_keep=1)  # logits unread: the last position only
    return torch.stack([cache[name].float() for name in names])


@torch.no_grad()
def sequence_head_scores(
    model: Transformer, tokens: Tensor, period: int, start: int | None = None
) -> dict[str, Tensor]:
    """``head_scores`` for each sequence of ``tokens`` on its own, from one batched pass:
    ``{"previous" | "duplicate" | "induction": [sequence, layer, head]}`` (for intervals over
    sequences; every sequence has the same query positions, so their mean is ``head_scores``)."""
    patterns = attention_patterns(model, tokens)  # [layer, batch, head, q, k]
    n_pos = tokens.shape[1]
    queries = torch.arange(n_pos)
    repeat = queries[queries >= (n_pos - period if start is None else start)]
    scores = {
        "previous": patterns[..., queries[1:], queries[1:] - 1],  # [layer, batch, head, query]
        "duplicate": patterns[..., repeat, repeat - period],
        "induction": patterns[..., repeat, repeat - period + 1],
    }
    return {name: value.mean(-1).transpose(0, 1) for name, value in scores.items()}


@torch.no_grad()
def in_context_losses(
    model: Transformer, tokens: Tensor, start: int, per_prompt: bool = False
) -> tuple[float, float] | tuple[Tensor, Tensor]:
    """Mean next-token loss on the first pass of a repeated sequence and on its repeat, which
    begins at position ``start``; a model that copies from context has a much lower loss on
    the repeat (random tokens are otherwise unpredictable). The repeat's first token, which
    nothing in context predicts, counts in neither. With ``per_prompt``, two ``[batch]``
    tensors, each sequence's own means (for intervals over sequences); every sequence has the
    same number of positions in each part, so their means are the overall means.
    """
    losses = next_token_losses(model, tokens)  # [batch, pos - 1]: entry i is token i + 1's loss
    first, repeat = losses[:, : start - 1].mean(1), losses[:, start:].mean(1)
    return (first, repeat) if per_prompt else (first.mean().item(), repeat.mean().item())


@torch.no_grad()
def next_token_losses(model: Transformer, tokens: Tensor, fwd_hooks=(), start: int = 0) -> Tensor:
    """Cross-entropy of each next token from position ``start`` on, with ``fwd_hooks`` applied:
    ``[batch, pos - 1 - start]``, entry ``i`` the loss of token ``start + i + 1``.

    The final residual is unembedded a few hundred positions at a time, each chunk's loss taken
    before the next: a whole batch's logits are gigabytes for Gemma's 262k-token vocabulary, and
    writing, copying and normalising them cost nearly as much as the forward pass."""
    final = model.resid_names()[-1]  # the unembedding's input: the ablations' last boundary is before it
    with model.hooks(list(fwd_hooks)):
        _, cache = model.run_with_cache(tokens, [final], logits_to_keep=1)
    x = cache[final][:, start:-1].flatten(0, 1)  # [batch * positions, d_model]
    targets = tokens[:, start + 1 :]
    wide = torch.promote_types(x.dtype, torch.float32)  # bfloat16 logits in float32; float64 kept
    losses = [
        torch.nn.functional.cross_entropy(model.to_logits(rows).to(wide), wanted, reduction="none")
        for rows, wanted in zip(x.split(LOSS_CHUNK), targets.flatten().split(LOSS_CHUNK), strict=True)
    ]
    return torch.cat(losses).view(targets.shape)


LOSS_CHUNK = 256  # positions unembedded at once: 268 MB of Gemma-3-270M's float32 logits
