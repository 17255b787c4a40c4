"""The training layer: training runs cached by their configuration (``training``), the
optimisers the book compares (``optim``), the run records kept in the repository (``records``),
the experiment queues of the basis chapters (``experiments``) and ``load``, which knows trained
runs as well as every pretrained model (``loading``).

    python -m resid.train --preset tiny-basisfree
    python -m resid.train.experiments queue <design> [--workers N] [--estimate]
"""

from .loading import check_name, load
from .training import (
    LATER_FIELDS,
    LATER_MODEL_FIELDS,
    OPTIMIZERS,
    PRECISIONS,
    PRESETS,
    REPEATED_RANDOM,
    Optimizers,
    TrainConfig,
    TrainResult,
    batch_of,
    cached,
    compact,
    config_from_dict,
    corpus_ids,
    default_device,
    describe,
    drop_weights,
    estimated_seconds,
    evaluate,
    held_out_windows,
    history_path,
    lr_at,
    make_optimizer,
    measure,
    optimizer_basis,
    parse_overrides,
    run_history,
    train,
    train_queue,
    window_losses,
)
