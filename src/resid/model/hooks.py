"""Hook factories: the interventions the chapters make, each returned as ``[(hook name,
function)]`` for ``Transformer.hooks`` or ``run_with_hooks``.

Every function here replaces part of an activation by a value that broadcasts against it: a
counterfactual run's activation (resampling), a mean over prompts (mean ablation), a constant,
or zero; it never edits its input in place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from torch import Tensor

from .cache import Head, HeadLike, act_name
from .transformer import HookFn


def replace_heads(
    heads: Iterable[HeadLike], source: Sequence[Tensor] | Mapping[int, Tensor], position: int | None = None
) -> list[tuple[str, HookFn]]:
    """Replace the chosen heads' outputs (``hook_z``, ``[batch, pos, head, d_head]``) by
    ``source[layer][..., head, :]``: a layer's source is anything that broadcasts against its
    ``hook_z`` (a counterfactual run's ``[batch, pos, head, d_head]``, a mean over prompts
    ``[pos, head, d_head]``, a constant ``[head, d_head]``). ``heads`` in any spelling
    (``Head(3, 2)``, ``(3, 2)``, ``"L3H2"``); one hook per layer replaces all of that layer's.
    ``position`` (e.g. -1, the last) replaces there only, whatever the sequence's length."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in map(Head.of, heads):
        by_layer.setdefault(layer, []).append(head)

    def hook_for(layer: int, chosen: list[int]) -> HookFn:
        def hook(z: Tensor, hook_point) -> Tensor:
            z = z.clone()
            if position is None:
                z[:, :, chosen] = source[layer][..., chosen, :].to(z.dtype)
            else:
                z[:, position, chosen] = source[layer][..., chosen, :].to(z.dtype)
            return z

        return hook

    return [(act_name("z", layer), hook_for(layer, chosen)) for layer, chosen in by_layer.items()]


def replace_coordinates(
    name: str, index: Sequence[int] | Tensor, source: Tensor | float
) -> list[tuple[str, HookFn]]:
    """Replace coordinates ``index`` of the last axis of activation ``name`` (neurons of
    ``mlp.hook_post``, dimensions of the residual stream) by ``source[..., index]`` (anything
    that broadcasts against the activation) or by a number (0 for zero ablation)."""

    def hook(x: Tensor, hook_point) -> Tensor:
        x = x.clone()
        x[..., index] = source if isinstance(source, float | int) else source[..., index].to(x.dtype)
        return x

    return [(name, hook)]
