"""Training-run records: what the chapters read from a training run, kept in the repository.

A record is one training run, named by its configuration key exactly as the cache names its
checkpoint. ``<key>.json`` holds the full configuration, the logged history, where and how long
the run trained, and every *measurement* a chapter took of the trained model: the value of
``fn(model, **inputs)``, filed under the function's name, a hash of its source and a hash of its
inputs (``resid.train.measure`` takes them, ``resid.lenses.measure`` of a tuned lens, both
through ``measured``). A run small enough to commit (at most
``WEIGHTS_UP_TO`` parameters, such as the two-layer induction models) also keeps its weights,
float32 as trained, in ``<key>.safetensors``, for the chapters that ablate or probe it. A larger
run keeps its weights only where a chapter asks (``train(cfg, keep_weights=True)``), at half
precision.

With the records in place a chapter re-executes without training anything: its curves come from
the histories, its statistics from the measurements. A measurement that is missing (new code, new
inputs) needs the weights, so that run is trained (or loaded from the local cache) and its record
gains the measurement.

The Training Data Attribution chapter's retrainings are records too (``resid.tda.retrained_losses``),
keyed by their schedule, their training windows and the windows left out, each holding the retrained
model's test losses as its measurement.

Where records live: ``$RESID_RECORDS`` if set, else ``book/runs`` of this repository. They are
read always, except those written before a retrain began (``$RESID_RETRAIN``, which
``make chapter CH=... RETRAIN=1`` sets); they are written only where ``$RESID_RECORDS`` is set
(the book's runner sets it), so a ``train()`` typed into a notebook never writes into the
repository.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from resid.runtime.paths import book_folder

# torch, numpy and pandas are imported where values are encoded: `python -m resid.book status`
# reads this module and stays quick.
ENV, RETRAIN_ENV = "RESID_RECORDS", "RESID_RETRAIN"
DEFAULT = book_folder("book/runs")
FORMAT = 1
WEIGHTS_UP_TO = 300_000  # parameters: about 1.2 MB of float32 per run
REQUIRED = ("format", "key", "config", "history", "step", "measurements")


class RecordError(ValueError):
    """A record that cannot be trusted: corrupt, truncated, or filed under another key."""


def directory() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT)


def writable() -> bool:
    return bool(os.environ.get(ENV))


def retraining_since() -> float | None:
    """While retraining, the time it started: a record or checkpoint written before then is
    neither read nor resumed, so its run trains again from scratch. None otherwise."""
    value = os.environ.get(RETRAIN_ENV)
    return float(value) if value else None


def current(path: Path) -> bool:
    """Exists, and is not older than a retrain under way."""
    since = retraining_since()
    return path.exists() and (since is None or path.stat().st_mtime >= since)


def json_path(key: str) -> Path:
    return directory() / f"{key}.json"


def weights_path(key: str) -> Path:
    return directory() / f"{key}.safetensors"


def read(key: str) -> dict | None:
    """The record filed under ``key``, checked; None if there is none (or while retraining).
    A corrupt or truncated file raises ``RecordError`` naming it; nothing is overwritten."""
    path = json_path(key)
    if not current(path):
        return None
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RecordError(f"{path}: not a readable run record ({error}); restore it (git checkout) "
                          "or delete it to retrain") from None  # fmt: skip
    missing = [field for field in REQUIRED if field not in record] if isinstance(record, dict) else REQUIRED
    if missing:
        raise RecordError(f"{path}: truncated run record, no {', '.join(missing)}; restore it (git checkout) "
                          "or delete it to retrain")  # fmt: skip
    if record["key"] != key:
        raise RecordError(f"{path}: the record inside is filed as {record['key']}, not {key}")
    if record["step"] < record["config"]["steps"]:
        raise RecordError(f"{path}: the run it records stopped at step {record['step']} of "
                          f"{record['config']['steps']}")  # fmt: skip
    return record


def write(record: dict, weights: dict | None = None) -> Path | None:
    """Write (or replace) a record, atomically; its weights too when given. Nothing happens where
    records are not writable. Returns the record's path, or None."""
    if not writable():
        return None
    path = json_path(record["key"])
    path.parent.mkdir(parents=True, exist_ok=True)
    if weights is not None:
        from safetensors.torch import save_file

        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        os.close(fd)
        save_file({k: v.detach().cpu().contiguous() for k, v in weights.items()}, tmp)
        os.replace(tmp, weights_path(record["key"]))
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, separators=(",", ":"))
    os.replace(tmp, path)
    return path


def read_weights(key: str) -> dict | None:
    path = weights_path(key)
    if not current(path):
        return None
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError) as error:
        raise RecordError(f"{path}: unreadable weights ({error}); restore it (git checkout) "
                          "or delete it") from None  # fmt: skip


def new(
    key: str, config: dict, history: list[dict], seconds: float | None, device: str, machine: str
) -> dict:
    """A record of a finished run, with no measurements yet."""
    return {
        "format": FORMAT, "key": key, "config": config, "history": history, "step": config["steps"],
        "seconds": seconds, "device": device, "machine": machine,
        "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "measurements": {},
    }  # fmt: skip


# --- measurements: a function of the trained model, filed by what computed it and from what ---


def measurement_id(fn, inputs: dict) -> str:
    """``function@<source hash>:<inputs hash>``: a change to the function's code or to any input
    files the value under another name, so a stale value is never read. The function's module is
    left out: moving a function unchanged (between modules, or out of a chapter into the
    package) keeps every value measured with it."""
    try:
        code = inspect.getsource(fn)
    except (OSError, TypeError):  # defined where no source is kept: its bytecode stands in
        code = fn.__code__.co_code.hex()
    digest = hashlib.sha256()
    for name in sorted(inputs):
        digest.update(name.encode() + b"=" + fingerprint(inputs[name]) + b";")
    code_hash = hashlib.sha256(code.encode()).hexdigest()[:12]
    return f"{fn.__qualname__}@{code_hash}:{digest.hexdigest()[:16]}"


def unqualified(name: str) -> str:
    """A measurement id as ``measurement_id`` writes it now, from one that may still carry its
    function's module (``resid.experiments.analyse@...``, as executions before 2026-12-07 recorded
    what they read): the function's name, its source hash and its inputs' hash are unchanged."""
    function, at, rest = name.partition("@")
    return function.rsplit(".", 1)[-1] + at + rest


def measured(
    name: str,
    load: Callable[[], dict | None],
    compute: Callable[[], object],
    owns: Callable[[dict], bool] = lambda record: True,
    on_read: Callable[[dict], None] = lambda record: None,
):
    """A run's measurement ``name`` (``measurement_id``): read from the run's record (``load()``)
    when it holds it (``on_read(record)`` is told), else ``compute()``d (which may train the run
    and so write its record) and filed in the record as it stands then, where ``owns(record)``
    (the record is the computed run's). The value comes back as the record stores it (tables,
    tensors, tuples restored), computed or read alike."""
    record = load()
    if record is not None and name in record["measurements"]:  # read() checks the field is there
        on_read(record)
        return decode(record["measurements"][name])
    encoded = encode(compute())
    record = load()
    if record is not None and owns(record):
        record["measurements"][name] = encoded
        write(record)
    return decode(encoded)


def fingerprint(value) -> bytes:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous()
        return f"tensor{tuple(value.shape)}{value.dtype}".encode() + value.numpy().tobytes()
    if isinstance(value, np.ndarray):
        return f"array{value.shape}{value.dtype}".encode() + np.ascontiguousarray(value).tobytes()
    if isinstance(value, list | tuple):
        return b"(" + b",".join(fingerprint(v) for v in value) + b")"
    if isinstance(value, dict):
        items = sorted(value.items())
        return b"{" + b",".join(fingerprint(k) + b":" + fingerprint(v) for k, v in items) + b"}"
    if isinstance(value, str | int | float | bool | type(None)):
        return repr(value).encode()
    raise TypeError(f"a measurement's input must be a tensor, array, number, string or a container of them, "
                    f"not {type(value).__name__}")  # fmt: skip


def encode(value):
    """A measured value as JSON: tables, tensors and arrays tagged so that ``decode`` restores them."""
    import numpy as np
    import pandas as pd
    import torch

    if isinstance(value, pd.DataFrame):
        split = value.to_dict(orient="split")  # Python's floats: a value reads back to the last bit
        return {"__dataframe__": {k: encode(v) for k, v in split.items()}}
    if isinstance(value, torch.Tensor):
        return {"__tensor__": value.detach().cpu().tolist(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, np.ndarray):
        return {"__array__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    return value


def decode(value):
    import numpy as np
    import pandas as pd
    import torch

    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "__dataframe__" in value:
        split = value["__dataframe__"]
        return pd.DataFrame(split["data"], index=split["index"], columns=split["columns"])
    if "__tensor__" in value:
        return torch.tensor(value["__tensor__"], dtype=getattr(torch, value["dtype"]))
    if "__array__" in value:
        return np.array(value["__array__"], dtype=value["dtype"])
    if "__tuple__" in value:
        return tuple(decode(v) for v in value["__tuple__"])
    return {k: decode(v) for k, v in value.items()}
