"""``resid.load``: every model the book reads, trained runs included.

The model layer (``resid.model.loaders``) loads pretrained weights and never trains; a trained
run's name (``trained:<preset>``, trained now if neither cached nor recorded, or a checkpoint's
path) needs this layer's configurations, so the one public ``load`` lives here.
"""

from __future__ import annotations

import torch

from resid.model import Transformer, loaders
from resid.model.data import ByteTokenizer

from .training import PRESETS, config_from_dict, train


def load(name: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> Transformer:
    """The model called ``name``, in eval mode, with its tokenizer at ``model.tokenizer``: a trained
    run, or any name ``resid.model.loaders.load`` accepts (its docstring lists them)."""
    if not loaders.is_trained_run(name):
        return loaders.load(name, dtype=dtype, device=device)
    check_name(name)  # an unknown preset is one line, before anything trains
    if name.startswith("trained:"):
        model = train(PRESETS[name.removeprefix("trained:")]).model
    else:
        state = torch.load(name, weights_only=False)
        model = Transformer(config_from_dict(state["config"]).model)
        model.load_state_dict(state["model"])
        model.tokenizer = ByteTokenizer()
    return model.to(device=device, dtype=dtype).eval()


def check_name(name: str) -> None:
    """Raise ``UnknownModelError`` at once if ``load(name)`` cannot succeed here, without loading
    anything: so that a chapter given a bad name fails before any work starts."""
    if name.startswith("trained:"):
        if name.removeprefix("trained:") not in PRESETS:
            raise loaders.UnknownModelError(
                f"unknown trained preset {name!r}; choose one of {sorted(PRESETS)}")  # fmt: skip
        return
    loaders.check_name(name)
