"""resid: the residual stream of transformer language models, on a laptop CPU."""

from .loaders import EMBEDDED, UnknownModelError, from_hf, load, sentence_embeddings
from .model import Config, HookPoint, Transformer
from .stats import (
    haar_rotation,
    kurtosis,
    kurtosis_metric,
    massive_activations,
    outlier_dims,
    rotated_kurtosis,
)

__all__ = [
    "EMBEDDED",
    "Config",
    "HookPoint",
    "Transformer",
    "UnknownModelError",
    "from_hf",
    "haar_rotation",
    "kurtosis",
    "kurtosis_metric",
    "load",
    "massive_activations",
    "outlier_dims",
    "rotated_kurtosis",
    "sentence_embeddings",
]
