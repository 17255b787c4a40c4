import math

import pytest
import torch

import resid
from resid.model import Config
from resid.train import (
    TrainConfig,
    evaluate,
    held_out_windows,
    lr_at,
    records,
    train,
    train_queue,
    window_losses,
)

TINY = TrainConfig(
    model=Config(d_model=32, n_layers=2, n_heads=2, d_mlp=64, n_ctx=32),
    steps=30, warmup_steps=5, batch_size=8, eval_every=10, eval_batches=2, checkpoint_every=10,
)  # fmt: skip


def test_tiny_run_learns_and_is_deterministic(monkeypatch, tmp_path):
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "a"))
    first = train(TINY, progress=False)
    losses = [row["train_loss"] for row in first.history]
    assert len(losses) == TINY.steps
    assert sum(losses[-5:]) / 5 < losses[0] - 1.0  # from ~ln 256 = 5.5 towards byte statistics
    assert first.history[-1]["val_loss"] < math.log(256) - 1.0
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "b"))
    second = train(TINY, progress=False)
    assert [row["train_loss"] for row in second.history] == losses


@pytest.mark.parametrize("optimizer", ["adamw", "shared_basis_adamw"])
def test_interrupted_run_resumes_to_the_same_result(monkeypatch, tmp_path, optimizer):
    cfg = TrainConfig(**{**TINY.__dict__, "optimizer": optimizer})
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "whole"))
    whole = train(cfg, progress=False)
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "parts"))
    partial = train(cfg, progress=False, stop_after=13)
    assert len(partial.history) == 13
    assert not list(partial.path.parent.glob("*.tmp"))  # checkpoints are renamed into place
    resumed = train(cfg, progress=False)  # the optimiser's state (moments, rotations) comes back too
    assert [r["train_loss"] for r in resumed.history] == [r["train_loss"] for r in whole.history]
    for a, b in zip(resumed.model.state_dict().values(), whole.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_finished_run_is_loaded_not_retrained(monkeypatch, tmp_path):
    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    first = train(TINY, progress=False)
    mtime = first.path.stat().st_mtime_ns
    again = train(TINY, progress=False)
    assert again.path.stat().st_mtime_ns == mtime
    loaded = resid.load(str(first.path))
    tokens = torch.randint(0, 256, (1, 32))
    torch.testing.assert_close(loaded(tokens), first.model(tokens))


def test_config_hash_changes_with_any_field():
    assert TINY.key() != TrainConfig(**{**TINY.__dict__, "seed": 1}).key()
    assert TINY.key() != TrainConfig(**{**TINY.__dict__, "model": Config(norm="basisfree")}).key()


def test_a_bfloat16_run_is_its_own_run_and_learns_like_float32(monkeypatch, tmp_path):
    # runs cached before the precision field existed keep their keys
    assert TINY.key() == "43697044cefc109f"  # its key before TrainConfig.precision was added
    half = TrainConfig(**{**TINY.__dict__, "precision": "bfloat16"})
    assert half.key() != TINY.key()
    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    full_losses = [row["train_loss"] for row in train(TINY, progress=False).history]
    result = train(half, progress=False)
    half_losses = [row["train_loss"] for row in result.history]
    assert half_losses != full_losses  # the matmuls really ran in bf16
    assert abs(half_losses[-1] - full_losses[-1]) < 0.1 and half_losses[-1] < half_losses[0] - 1.0
    assert all(p.dtype == torch.float32 for p in result.model.parameters())  # master weights stay fp32


def test_warmup_then_cosine_schedule():
    cfg = TrainConfig(lr=1.0, steps=110, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(cfg, 0) == pytest.approx(0.1)
    assert lr_at(cfg, 9) == pytest.approx(1.0)
    assert lr_at(cfg, 60) == pytest.approx(0.55)
    assert lr_at(cfg, 110) == pytest.approx(0.1)


def test_sgd_run_learns(monkeypatch, tmp_path):
    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    cfg = TrainConfig(**{**TINY.__dict__, "optimizer": "sgd", "lr": 0.3, "weight_decay": 0.0})
    losses = [row["train_loss"] for row in train(cfg, progress=False).history]
    assert losses[-1] < losses[0] - 0.5


def test_bad_training_config_is_a_clear_error():
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="adagrad")
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="float16")
    with pytest.raises(ValueError, match="byte tokens"):
        train(TrainConfig(model=Config(vocab_size=1000)), progress=False)


def _ddp_worker(rank: int, world: int, port: int, cache: str, cfg: TrainConfig) -> None:
    import os

    os.environ |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RESID_CACHE": cache}
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        train(cfg, progress=False, device=torch.device("cpu"))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_process_ddp_matches_single_process(monkeypatch, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = TrainConfig(**{**TINY.__dict__, "steps": 12, "eval_every": 6, "checkpoint_every": 6})
    torch.multiprocessing.spawn(_ddp_worker, args=(2, port, str(tmp_path / "ddp"), cfg), nprocs=2)
    ddp = torch.load(tmp_path / "ddp" / "runs" / f"{cfg.key()}.pt", weights_only=False)
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "single"))
    single = train(cfg, progress=False, device=torch.device("cpu"))
    assert ddp["step"] == 12
    losses = [r["train_loss"] for r in ddp["history"]]
    assert losses == pytest.approx([r["train_loss"] for r in single.history], rel=1e-4)
    for name, value in single.model.state_dict().items():
        torch.testing.assert_close(ddp["model"][name], value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["rotated_adamw", "shared_basis_adamw", "scalar_adamw", "muon", "soap"])
def test_every_optimizer_trains_the_model(monkeypatch, tmp_path, optimizer):
    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    cfg = TrainConfig(**{**TINY.__dict__, "optimizer": optimizer, "lr": 1e-2})
    first = [row["train_loss"] for row in train(cfg, progress=False).history]
    assert first[-1] < first[0] - 0.5
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "again"))
    assert [row["train_loss"] for row in train(cfg, progress=False).history] == first


def test_training_time_is_recorded_summed_over_sessions_and_reported_on_load(monkeypatch, tmp_path):
    from resid.runtime import provenance

    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    monkeypatch.setattr(provenance, "BUILDS", [])
    partial = train(TINY, progress=False, stop_after=13)
    first_part = torch.load(partial.path, weights_only=False)["seconds"]
    resumed = train(TINY, progress=False)
    total = torch.load(resumed.path, weights_only=False)["seconds"]
    assert 0 < first_part < total
    train(TINY, progress=False)  # cached: nothing is trained, the recorded time is reported
    name = f"training run {TINY.key()}"
    assert [(b["name"], b["built_now"]) for b in provenance.BUILDS] == [(name, True)] * 2 + [(name, False)]
    assert provenance.BUILDS[-1]["seconds"] == pytest.approx(total)


def test_a_run_inside_a_chapter_reports_its_progress_to_the_runner(monkeypatch, tmp_path):
    """In a chapter (the runner sets RESID_PROGRESS) a run shows a bar even with
    progress=False, which only keeps the bar out of the notebook."""
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RESID_PROGRESS", str(tmp_path / "progress.log"))
    train(TINY, progress=False)
    shown = (tmp_path / "progress.log").read_text()
    assert f"training {TINY.key()[:8]} (adamw, layernorm, seed 0)" in shown and "30/30" in shown


def test_compacted_run_loads_the_same_model_and_cannot_resume(monkeypatch, tmp_path):
    from resid.train import compact

    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    first = train(TINY, progress=False)
    assert torch.load(first.path, weights_only=False)["device"] == "cpu"
    saved = compact(first.path)
    assert saved > first.path.stat().st_size  # AdamW's two moments outweigh the weights
    again = train(TINY, progress=False)
    assert again.history == first.history
    for a, b in zip(again.model.state_dict().values(), first.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    unfinished = train(TrainConfig(**{**TINY.__dict__, "seed": 1}), progress=False, stop_after=10)
    assert compact(unfinished.path) == 0  # still needed to resume
    state = torch.load(unfinished.path, weights_only=False)
    del state["optimizer"]
    torch.save(state, unfinished.path)
    with pytest.raises(ValueError, match="it cannot resume"):
        train(TrainConfig(**{**TINY.__dict__, "seed": 1}), progress=False)


def test_a_run_trained_on_another_device_is_timed_here_once(monkeypatch, tmp_path):
    from resid.runtime import provenance

    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    monkeypatch.setattr(provenance, "BUILDS", [])
    path = train(TINY, progress=False).path
    state = torch.load(path, weights_only=False)
    state["device"], state["seconds"] = "cuda: NVIDIA H200", 1e-6
    torch.save(state, path)
    provenance.BUILDS.clear()
    torch.manual_seed(0)
    train(TINY, progress=False)
    after_estimate = torch.rand(1)
    torch.manual_seed(0)
    train(TINY, progress=False)  # the estimate is remembered, not timed again
    assert torch.equal(torch.rand(1), after_estimate)  # and timing did not move the random stream
    estimate = torch.load(path, weights_only=False)["seconds_here"]["cpu"]
    assert estimate > 1e-3
    loaded = provenance.BUILDS[-1]
    assert (loaded["device"], loaded["estimated"], loaded["seconds"]) == ("cuda: NVIDIA H200", True, estimate)
    times = provenance.rerun_times(0.0)
    assert times["cold_estimated"] and times["built_on"] == {"cuda: NVIDIA H200": 1}
    assert provenance.built_on(times).startswith("1 on an NVIDIA H200 GPU;")


def test_a_sweep_keeps_its_histories_without_the_weights(monkeypatch, tmp_path):
    from resid.train import drop_weights, run_history

    monkeypatch.setenv("RESID_CACHE", str(tmp_path))
    cfg = TrainConfig(**{**TINY.__dict__, "optimizer": "shared_basis_adamw"})
    first = train(cfg, progress=False)
    evaluation = first.history[-1]
    assert len(evaluation["val_losses"]) == cfg.eval_batches
    assert evaluation["val_loss"] == pytest.approx(sum(evaluation["val_losses"]) / cfg.eval_batches)
    n_boundaries = cfg.model.n_layers + 1
    assert len(evaluation["kurtosis_optimizer_basis"]) == len(evaluation["top4_energy_share"]) == n_boundaries
    record = drop_weights(first.path)
    assert not first.path.exists()
    assert run_history(cfg) == first.history  # read back exactly, nothing retrained
    assert not first.path.exists()
    with pytest.raises(ValueError, match="has not finished"):
        drop_weights(train(TINY, progress=False, stop_after=5).path)
    assert record.exists()


def test_the_whole_split_is_evaluated_once_per_target_and_deterministically():
    ids = torch.arange(1000) % 256
    windows = held_out_windows(ids, 32)
    assert windows.shape == (31, 33) and torch.equal(windows[1, 0], ids[32])  # one input overlaps
    targets = windows[:, 1:].flatten()
    assert torch.equal(targets, ids[1 : 1 + len(targets)])  # every target once, in order
    torch.manual_seed(0)
    model = resid.model.Transformer(TINY.model).eval()
    cfg = TrainConfig(**{**TINY.__dict__, "eval_batches": 0})
    first, second = evaluate(model, ids, cfg), evaluate(model, ids, cfg)
    assert first == second
    with torch.no_grad():
        per_window = window_losses(model, windows)
    assert first["val_loss"] == pytest.approx(per_window.mean().item(), rel=1e-6)
    assert first["val_loss_se"] == pytest.approx((per_window.std() / 31**0.5).item(), rel=1e-6)
    assert len(first["val_losses"]) == 4  # batches of 8 windows, the last one short


def test_a_queue_trains_what_has_no_record_in_parallel_as_it_would_one_by_one(monkeypatch, tmp_path):
    configs = [TrainConfig(**{**TINY.__dict__, "seed": s, "steps": 10}) for s in (1, 2, 3)]
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(records.ENV, str(tmp_path / "one-by-one"))
    alone = {cfg.key(): train(cfg, progress=False).history for cfg in configs[:2]}
    assert train_queue(configs, workers=1, progress=False) == [configs[2].key()]  # the others are recorded
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache-parallel"))
    monkeypatch.setenv(records.ENV, str(tmp_path / "parallel"))
    assert sorted(train_queue(configs + configs[:1], workers=2, progress=False)) == sorted(
        c.key() for c in configs
    )
    for key, history in alone.items():  # one core per process sums in another order: the same run to 1e-5
        recorded = records.read(key)["history"]
        for got, want in zip(recorded, history, strict=True):
            assert got["train_loss"] == pytest.approx(want["train_loss"], rel=1e-5)
        assert recorded[-1]["val_loss"] == pytest.approx(history[-1]["val_loss"], rel=1e-5)
    assert train_queue(configs, workers=2, progress=False) == []


def test_a_queue_calls_after_on_each_run_it_trains_with_its_weights_at_hand(monkeypatch, tmp_path):
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(records.ENV, str(tmp_path / "runs"))
    configs = [TrainConfig(**{**TINY.__dict__, "seed": s, "steps": 5}) for s in (1, 2)]
    seen = []

    def after(cfg):  # what a chapter's measurement needs: the finished run, in the cache
        seen.append((cfg.key(), len(train(cfg, progress=False).history)))

    assert train_queue(configs, progress=False, after=after) == [c.key() for c in configs]
    assert seen == [(c.key(), 5) for c in configs]
