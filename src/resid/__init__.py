"""resid: the residual stream of transformer language models, on a laptop CPU.

The package is five layers, each importing only those below it (``tests/test_layers.py`` holds
the contract, with import-linter):

    resid.book      executing chapters, their pages, handouts and the course
    resid.tools     the interpretability methods and behaviours the chapters study
    resid.train     training runs, optimisers, run records, experiment queues; ``load``
    resid.stats     estimators, intervals, metrics, the claim ledger
    resid.model     the transformer, its cache and hooks, tokenizers, pretrained loaders
    resid.runtime   paths, progress bars, provenance (shared by every layer)

``import resid`` gives the names a reader starts from (``resid.load``, ``resid.Transformer``,
the kurtosis statistics). Each module also answers to its name before the layers existed
(``resid.heads`` is ``resid.tools.heads``, ``from resid.cache import Head`` still works): the
committed chapters import them so, and their fingerprints hash their code as it is.
"""

import importlib
import importlib.abc
import importlib.util
import sys

from .model import Config, HookPoint, Transformer
from .model.loaders import EMBEDDED, UnknownModelError, from_hf, sentence_embeddings
from .stats import (
    haar_rotation,
    kurtosis,
    kurtosis_metric,
    massive_activations,
    outlier_dims,
    rotated_kurtosis,
)
from .train import load

# Where each module of the flat package of the first chapters lives now. The four whose old name
# is now a layer (model, stats, train, book) need no entry: each layer re-exports its main module.
MOVED = {
    "cache": "resid.model.cache", "hooks": "resid.model.hooks", "basis": "resid.model.basis",
    "loaders": "resid.model.loaders", "data": "resid.model.data",
    "paths": "resid.runtime.paths", "progress": "resid.runtime.progress",
    "provenance": "resid.runtime.provenance",
    "interval": "resid.stats.interval", "metrics": "resid.stats.metrics", "claims": "resid.stats.claims",
    "optim": "resid.train.optim", "records": "resid.train.records", "experiments": "resid.train.experiments",
    **{name: f"resid.tools.{name}" for name in (
        "attribution", "lrp", "lenses", "patching", "circuits", "das", "heads", "neurons", "dimensions",
        "function_vectors", "tda", "behaviours", "tasks", "plans", "lm_eval_adapter")},
    **{name: f"resid.book.{name}" for name in (
        "course", "exercises", "freshness", "handouts", "pages", "parameters", "presentation", "sources")},
}  # fmt: skip


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import resid.<old name>`` answers with the module at its new place (one module object)."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname.removeprefix(f"{__name__}.")
        if old != fullname and old in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name.removeprefix(f"{__name__}.")])

    def exec_module(self, module):
        pass  # already executed where it lives


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str):
    if name in MOVED:  # resid.heads after a plain `import resid`
        return importlib.import_module(MOVED[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
