"""The activations of one forward pass, with the operations interpretability uses on them.

Names and meanings follow TransformerLens's ``ActivationCache``, so that a reader who learnt it
reads the chapters without a glossary: ``cache["resid_post", 3]`` is
``cache["blocks.3.hook_resid_post"]``; ``accumulated_resid`` is the residual stream at every
layer boundary; ``decompose_resid`` is what each layer wrote; ``stack_head_results`` is what
each head wrote; ``apply_ln_to_stack`` passes a stack of residual vectors through the final
norm with its scale frozen at the run's own (which makes the norm linear, so that the
components' images add up to the normalised residual); ``logit_attrs`` reads a stack out
through the unembedding. Head labels print as ``L3H2``.
"""

from __future__ import annotations

from typing import NamedTuple, Union

import torch
from torch import Tensor, nn

from .basis import read, write

# short name -> where its hook sits inside block i (TransformerLens's ``utils.get_act_name``)
SHORT_NAMES = {
    "resid_pre": "hook_resid_pre",
    "resid_mid": "hook_resid_mid",
    "resid_post": "hook_resid_post",
    "attn_in": "hook_attn_in",
    "attn_out": "hook_attn_out",
    "mlp_in": "hook_mlp_in",
    "mlp_out": "hook_mlp_out",
    "q": "attn.hook_q",
    "k": "attn.hook_k",
    "v": "attn.hook_v",
    "rot_k": "attn.hook_rot_k",  # keys after the rotary embedding
    "z": "attn.hook_z",
    "pattern": "attn.hook_pattern",
    "pre": "mlp.hook_pre",
    "pre_linear": "mlp.hook_pre_linear",
    "post": "mlp.hook_post",
    "scale": "ln1.hook_scale",
    "normalized": "ln1.hook_normalized",
}


def act_name(name: str, layer: int | None = None) -> str:
    """The full hook name of ``name`` (short or full) in block ``layer``: ``act_name("z", 3)`` is
    ``"blocks.3.attn.hook_z"``; without a layer, ``"embed"`` and ``"scale"`` name the embedding's
    and the final norm's hooks."""
    if layer is None:
        return {"embed": "hook_embed", "scale": "ln_final.hook_scale"}.get(name, name)
    if name not in SHORT_NAMES:
        raise KeyError(f"no activation {name!r}; short names are {sorted(SHORT_NAMES)}")
    return f"blocks.{layer}.{SHORT_NAMES[name]}"


HeadLike = Union["Head", tuple[int, int], str]  # what every function that takes a head accepts


class Head(NamedTuple):
    """An attention head, ``Head(3, 2)``, which prints as ``L3H2``."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}H{self.head}"

    @classmethod
    def of(cls, head: HeadLike) -> Head:
        """Any spelling of a head as a ``Head``: ``Head(3, 2)``, ``(3, 2)`` or ``"L3H2"``."""
        if isinstance(head, str):
            return cls.parse(head)
        layer, index = head
        return cls(int(layer), int(index))

    @classmethod
    def parse(cls, label: str) -> Head:
        """``Head.parse("L3H2") == Head(3, 2)``."""
        layer, _, head = label.removeprefix("L").partition("H")
        if not (layer.isdigit() and head.isdigit()):
            raise ValueError(f"{label!r} is not a head label like 'L3H2'")
        return cls(int(layer), int(head))


class ActivationCache(dict):
    """``{hook name: activation}`` from ``Transformer.run_with_cache``, tied to its model."""

    # ``model`` is the ``Transformer`` that ran: typed as a module, since the transformer builds
    # caches and a cache naming its class would make the two modules import each other
    def __init__(self, activations: dict[str, Tensor], model: nn.Module):
        super().__init__(activations)
        self.model = model

    def __getitem__(self, key: str | tuple) -> Tensor:
        name = act_name(*key) if isinstance(key, tuple) else key
        if name not in self:
            raise KeyError(f"{name!r} was not cached; run_with_cache with it among `names` (or all)")
        return super().__getitem__(name)

    def accumulated_resid(
        self, layer: int | None = None, apply_ln: bool = False, pos_slice=None, return_labels: bool = False
    ) -> Tensor | tuple[Tensor, list[str]]:
        """The residual stream before block 0, 1, ... ``layer`` (default: every boundary and the
        final residual): ``[boundary, batch, pos, d_model]``. The logit lens is
        ``logit_attrs(accumulated_resid(apply_ln=True), tokens)``."""
        n = self.model.cfg.n_layers
        layer = n if layer is None else layer
        names = [act_name("resid_pre", i) for i in range(min(layer, n))]
        labels = [f"{i}_pre" for i in range(min(layer, n))]
        if layer == n:
            names.append(act_name("resid_post", n - 1))
            labels.append("final_post")
        stack = self._select(torch.stack([self[name] for name in names]), pos_slice)
        stack = self.apply_ln_to_stack(stack, pos_slice) if apply_ln else stack
        return (stack, labels) if return_labels else stack

    def decompose_resid(
        self, layer: int | None = None, apply_ln: bool = False, pos_slice=None, return_labels: bool = False
    ) -> Tensor | tuple[Tensor, list[str]]:
        """What was written into the residual stream before block ``layer`` (default: all of
        it): the embedding, then each block's attention and MLP outputs. ``[component, batch,
        pos, d_model]``; the components sum to the residual stream there."""
        self._pre_norm_only()
        n = self.model.cfg.n_layers
        names, labels = ["hook_embed"], ["embed"]
        for i in range(n if layer is None else layer):
            names.append(act_name("attn_out", i))
            labels.append(f"{i}_attn_out")
            if self.model.blocks[i].mlp is not None:
                names.append(act_name("mlp_out", i))
                labels.append(f"{i}_mlp_out")
        stack = self._select(torch.stack([self[name] for name in names]), pos_slice)
        stack = self.apply_ln_to_stack(stack, pos_slice) if apply_ln else stack
        return (stack, labels) if return_labels else stack

    def stack_head_results(
        self, layer: int | None = None, apply_ln: bool = False, pos_slice=None, return_labels: bool = False
    ) -> Tensor | tuple[Tensor, list[str]]:
        """What every head of blocks ``0 .. layer - 1`` (default: all) wrote into the residual,
        without the output bias: ``[head, batch, pos, d_model]``, labelled ``L{l}H{h}``.

        A sandwich-norm block (Gemma) normalises its heads' summed output before adding it; each
        head's share is then its write through that norm with the scale frozen at this run's (as
        ``apply_ln_to_stack`` freezes the final norm's), and the shares sum to what the block
        added (minus the output bias's share)."""
        self._pre_norm_only()
        parts, labels = [], []
        for i in range(self.model.cfg.n_layers if layer is None else layer):
            block = self.model.blocks[i]
            written = write(block.attn.head_results(self[act_name("z", i)]), block.R_attn_out)  # [b, p, h, d]
            post = getattr(block, "ln1_post", None)
            if post is not None:
                bias = 0 if block.attn.W_O.bias is None else write(block.attn.W_O.bias, block.R_attn_out)
                scale = post.scale(written.sum(2) + bias)  # [batch, pos, 1]: the norm's, of the whole output
                written = post.linear(written, scale[:, :, None]).to(written.dtype)
            parts.append(written.movedim(2, 0))
            labels += [str(Head(i, h)) for h in range(self.model.cfg.n_heads)]
        stack = self._select(torch.cat(parts), pos_slice)
        stack = self.apply_ln_to_stack(stack, pos_slice) if apply_ln else stack
        return (stack, labels) if return_labels else stack

    def apply_ln_to_stack(self, stack: Tensor, pos_slice=None) -> Tensor:
        """The final norm applied to each residual vector of ``stack`` ``[component, batch, pos,
        d_model]`` with its scale frozen at this run's final residual (bias left out): linear,
        so the components' images sum to the normalised residual minus the bias."""
        norm = self.model.ln_final
        if norm is None:
            return stack
        final = self._select(
            self[act_name("resid_post", self.model.cfg.n_layers - 1)], pos_slice, stacked=False
        )
        if stack.shape[1:] != final.shape:
            raise ValueError(
                f"a stack of [component, {', '.join(map(str, final.shape))}] was expected (the final "
                f"residual at these positions), got {list(stack.shape)}: pass pos_slice= the "
                "positions the stack was sliced at"
            )
        return norm.linear(stack, norm.scale(final))

    def logit_attrs(self, stack: Tensor, tokens: Tensor, incorrect_tokens: Tensor | None = None) -> Tensor:
        """Each component's contribution to the logit of ``tokens`` (minus ``incorrect_tokens``),
        for a stack already through the final norm (``apply_ln=True``): ``[component, batch,
        ...]``, where ``tokens`` is ``[batch]`` (one token per prompt) or shaped like the
        positions of the stack."""
        unembed = self.model.unembed.weight  # [vocab, d_model]
        direction = unembed[tokens] - (0 if incorrect_tokens is None else unembed[incorrect_tokens])
        if direction.dim() == 2 and stack.dim() == 4:  # one token per prompt, every position
            direction = direction[:, None, :]
        return (read(stack, self.model.R_unembed) * direction.to(stack.dtype)).sum(-1)

    def _select(self, x: Tensor, pos_slice, stacked: bool = True) -> Tensor:
        if pos_slice is None:
            return x
        index = (slice(None),) * (2 if stacked else 1) + (pos_slice,)
        return x[index]

    def _pre_norm_only(self) -> None:
        if self.model.cfg.post_norm:
            raise ValueError(
                "a post-norm model (BERT) normalises the residual itself; it is not a sum of writes"
            )
