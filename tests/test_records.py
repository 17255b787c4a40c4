"""Run records: a finished run is recorded; a chapter reads histories and measurements from the
record without training; a bad record fails with one line naming its file; retraining ignores
what was recorded before it."""

import json
import os
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

import resid.train.training
from resid.model import Config
from resid.train import TrainConfig, measure, records, run_history, train

TINY = TrainConfig(
    model=Config(d_model=32, n_layers=2, n_heads=2, d_mlp=64, n_ctx=32),
    steps=12, warmup_steps=3, batch_size=8, eval_every=6, eval_batches=2, checkpoint_every=6,
)  # fmt: skip


@pytest.fixture
def store(monkeypatch, tmp_path):
    """Records written to a scratch folder, and a cache that can be emptied."""
    monkeypatch.setenv(records.ENV, str(tmp_path / "records"))
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(records.RETRAIN_ENV, raising=False)
    return tmp_path


def empty_cache_and_forbid_training(monkeypatch, tmp_path, name: str) -> None:
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / name))

    def no_training(*args, **kwargs):
        raise AssertionError("trained, although the record holds what was asked")

    monkeypatch.setattr(resid.train.training, "_train_step", no_training)


def stream_statistics(model, tokens: torch.Tensor, boundary: int = 1) -> dict:
    """A measurement of the kind the chapters take: a table, a tensor, a tuple, a number."""
    stream = model.residual_stream(tokens)[boundary].float()
    table = pd.DataFrame({"dim": range(4), "mean": stream.mean(0)[:4].tolist(), "nan": np.nan})
    return {"table": table, "rms": stream.pow(2).mean().sqrt(), "shape": tuple(stream.shape), "n": 3}


def test_a_small_run_comes_back_from_its_record_exactly_without_training(store, monkeypatch):
    first = train(TINY, progress=False)
    key = TINY.key()
    assert records.json_path(key).exists() and records.weights_path(key).exists()
    record = json.loads(records.json_path(key).read_text())
    assert record["config"] == json.loads(json.dumps(resid.train.training.asdict(TINY)))
    assert record["history"] == first.history and record["seconds"] > 0 and record["machine"]
    empty_cache_and_forbid_training(monkeypatch, store, "empty")
    again = train(TINY, progress=False)
    assert again.history == first.history
    for a, b in zip(again.model.state_dict().values(), first.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert run_history(TINY) == first.history


def test_an_unfinished_checkpoint_does_not_shadow_a_finished_run_kept_whole(store, monkeypatch):
    first = train(TINY, progress=False)
    # a quick run elsewhere (its records in another folder) leaves a checkpoint of the same run,
    # stopped early, in the shared cache
    monkeypatch.setenv(records.ENV, str(store / "elsewhere"))
    (resid.train.training.cache_dir() / "runs" / f"{TINY.key()}.pt").unlink()
    train(TINY, progress=False, stop_after=6)
    monkeypatch.setenv(records.ENV, str(store / "records"))

    def no_training(*args, **kwargs):
        raise AssertionError("resumed the unfinished checkpoint instead of reading the record")

    monkeypatch.setattr(resid.train.training, "_train_step", no_training)
    again = train(TINY, progress=False)
    assert again.history == first.history
    for a, b in zip(again.model.state_dict().values(), first.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_finished_checkpoint_of_another_run_neither_shadows_nor_rewrites_the_record(store, monkeypatch):
    first = train(TINY, progress=False)
    written = records.json_path(TINY.key()).read_bytes()
    # another machine's training of the same configuration, finished, left in the shared cache
    checkpoint = resid.train.training.cache_dir() / "runs" / f"{TINY.key()}.pt"
    state = torch.load(checkpoint, weights_only=False)
    state["history"][0]["train_loss"] += 1.0
    state["model"] = {k: v + 0.01 if v.is_floating_point() else v for k, v in state["model"].items()}
    torch.save(state, checkpoint)
    again = train(TINY, progress=False)
    assert again.history == first.history
    for a, b in zip(again.model.state_dict().values(), first.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert records.json_path(TINY.key()).read_bytes() == written


def test_measurements_come_from_the_record_and_a_new_one_needs_the_weights(store, monkeypatch):
    monkeypatch.setattr(records, "WEIGHTS_UP_TO", 0)  # as for the book's larger models: no weights kept
    tokens = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(0))
    computed = measure(TINY, stream_statistics, tokens=tokens)
    assert not records.weights_path(TINY.key()).exists()
    history = run_history(TINY)
    empty_cache_and_forbid_training(monkeypatch, store, "empty")
    read = measure(TINY, stream_statistics, tokens=tokens)
    pd.testing.assert_frame_equal(read["table"], computed["table"])
    assert torch.equal(read["rms"], computed["rms"]) and read["shape"] == computed["shape"] == (128, 32)
    assert run_history(TINY) == history
    with pytest.raises(AssertionError, match="trained, although"):  # other inputs: not in the record
        measure(TINY, stream_statistics, tokens=tokens, boundary=2)


def test_a_large_run_keeps_its_weights_at_half_precision_only_where_asked(store, monkeypatch):
    monkeypatch.setattr(records, "WEIGHTS_UP_TO", 0)  # as for the book's larger models
    tokens = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(0))
    measured = measure(TINY, stream_statistics, tokens=tokens)  # trains: a record without weights
    assert not records.weights_path(TINY.key()).exists()
    full = train(TINY, progress=False).model  # from the cache, as trained
    kept = train(TINY, progress=False, keep_weights=True).model
    saved = records.read_weights(TINY.key())
    assert saved is not None and all(v.dtype == torch.float16 for v in saved.values())
    gaps = [(a - b).abs().max().item() for a, b in zip(kept.parameters(), full.parameters(), strict=True)]
    assert 0 < max(gaps) < 1e-2  # rounded, not retrained
    assert all(torch.equal(p, p.half().float()) for p in kept.parameters())
    record = records.read(TINY.key())
    assert records.measurement_id(stream_statistics, {"tokens": tokens}) in record["measurements"]
    empty_cache_and_forbid_training(monkeypatch, store, "empty")  # a fresh machine: the record alone
    again = train(TINY, progress=False, keep_weights=True).model
    for a, b in zip(again.parameters(), kept.parameters(), strict=True):
        assert torch.equal(a, b)
    pd.testing.assert_frame_equal(measure(TINY, stream_statistics, tokens=tokens)["table"], measured["table"])


def test_a_measurement_is_filed_under_its_code_and_its_inputs():
    tokens = torch.arange(8).view(2, 4)
    name = records.measurement_id(stream_statistics, {"tokens": tokens})
    assert name.startswith("stream_statistics@")  # the function, not where it lives
    assert records.measurement_id(stream_statistics, {"tokens": tokens.clone()}) == name
    assert records.measurement_id(stream_statistics, {"tokens": tokens + 1}) != name
    assert records.measurement_id(stream_statistics, {"tokens": tokens, "boundary": 2}) != name
    assert records.measurement_id(test_a_measurement_is_filed_under_its_code_and_its_inputs,
                                  {"tokens": tokens}).split(":")[1] == name.split(":")[1]  # fmt: skip
    with pytest.raises(TypeError, match="must be a tensor"):
        records.measurement_id(stream_statistics, {"tokens": object()})


@pytest.mark.parametrize("damage", ["truncated", "not json", "no history", "misfiled", "config edited"])
def test_a_bad_record_fails_with_one_line_naming_it_and_is_not_overwritten(store, monkeypatch, damage):
    train(TINY, progress=False)
    path = records.json_path(TINY.key())
    text = path.read_text()
    record = json.loads(text)
    damaged = {
        "truncated": text[: len(text) // 2],
        "not json": "\x00\x01 binary",
        "no history": json.dumps({k: v for k, v in record.items() if k != "history"}),
        "misfiled": json.dumps(record | {"key": "0123456789abcdef"}),
        "config edited": json.dumps(record | {"config": record["config"] | {"lr": 0.5}}),
    }[damage]
    path.write_text(damaged)
    monkeypatch.setenv("RESID_CACHE", str(store / "empty"))  # no checkpoint to fall back on
    for read in (lambda: train(TINY, progress=False), lambda: run_history(TINY)):
        with pytest.raises(records.RecordError) as error:
            read()
        message = str(error.value)
        assert str(path) in message and "\n" not in message
    assert path.read_text() == damaged


def test_retraining_ignores_records_and_checkpoints_written_before_it(store, monkeypatch):
    first = train(TINY, progress=False)
    an_hour_ago = time.time() - 3600
    for path in [records.json_path(TINY.key()), records.weights_path(TINY.key()), first.path]:
        os.utime(path, (an_hour_ago, an_hour_ago))
    steps = []
    step = resid.train.training._train_step
    monkeypatch.setattr(resid.train.training, "_train_step", lambda *a, **k: steps.append(1) or step(*a, **k))
    monkeypatch.setenv(records.RETRAIN_ENV, repr(time.time() - 1))
    again = train(TINY, progress=False)
    assert len(steps) == TINY.steps  # from scratch, not from the old checkpoint or record
    assert records.json_path(TINY.key()).stat().st_mtime > an_hour_ago
    assert train(TINY, progress=False).history == again.history and len(steps) == TINY.steps  # once


def test_records_are_written_only_where_asked(monkeypatch, tmp_path):
    monkeypatch.delenv(records.ENV, raising=False)
    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    train(replace(TINY, steps=4, eval_every=4), progress=False)
    assert not records.writable() and not any(records.DEFAULT.glob("*.tmp"))
    assert not records.json_path(replace(TINY, steps=4, eval_every=4).key()).exists()


def test_values_read_back_as_they_were_computed():
    value = {
        "table": pd.DataFrame({"a": [1.0, np.nan, 1 / 3], "b": [1, 2, 3], "c": ["x", "y", "z"]}),
        "tensor": torch.randn(3, 2),
        "array": np.arange(4.0) / 7,
        "pair": (np.float64(0.1), 2),
        "by seed": {1: [0.5]},
    }
    back = records.decode(json.loads(json.dumps(records.encode(value))))
    pd.testing.assert_frame_equal(back["table"], value["table"], check_exact=True, check_index_type=False)
    assert torch.equal(back["tensor"], value["tensor"]) and np.array_equal(back["array"], value["array"])
    assert back["pair"] == (0.1, 2) and back["by seed"] == {"1": [0.5]}
