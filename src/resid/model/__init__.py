"""The model layer: one transformer with named hook points (``transformer``), its activation
cache and per-head views (``cache``), hook builders (``hooks``), the residual basis and its
rotations (``basis``), readouts besides logits (``readouts``), tokenizers and corpora (``data``)
and the loaders that copy pretrained weights into it (``loaders``).

Nothing here imports from the layers above (``resid.stats``, ``resid.train``, ``resid.tools``,
``resid.book``); ``tests/test_layers.py`` holds the contract.
"""

from .transformer import (
    BLOCK_ROTATIONS,
    MLP,
    MLPS,
    NORMS,
    READ_WEIGHTS,
    ROTATIONS,
    WRITE_WEIGHTS,
    Attention,
    Block,
    Config,
    HookFn,
    HookPoint,
    Norm,
    Transformer,
    additive_mask,
    apply_rotary,
    causal_mask,
    fold_norm_gains,
    key_value_prefix,
    next_token_loss,
    rotary_tables,
    rotate_residual,
    scaled_frequencies,
)
