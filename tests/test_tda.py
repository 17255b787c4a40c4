"""Training data attribution: the training order, the gradients, the exact inverse, and a
planted artefact that both methods must find."""

import json

import pytest
import torch

from resid.model import Config, Transformer, next_token_loss
from resid.tools import tda

TINY = Config(vocab_size=256, n_ctx=16, d_model=16, n_layers=1, n_heads=2, d_mlp=32)


def random_windows(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(97, 123, (n, TINY.n_ctx + 1), generator=torch.Generator().manual_seed(seed))


def test_removing_windows_keeps_the_others_in_their_order():
    schedule = tda.Schedule(TINY, epochs=2, batch_size=4)
    full = torch.cat(tda.batch_order(10, schedule))
    kept = torch.cat(tda.batch_order(10, schedule, removed=[3, 7]))
    assert sorted(full[:10].tolist()) == list(range(10))  # an epoch sees every window once
    assert torch.equal(kept, full[(full != 3) & (full != 7)])


def test_per_window_gradients_average_to_the_batch_gradient():
    torch.manual_seed(0)
    model = Transformer(TINY)
    windows = random_windows(5)
    grads = tda.gradients(model, windows)
    loss = next_token_loss(model(windows[:, :-1]), windows)
    batch = torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))])
    assert grads.shape == (5, batch.numel())
    assert torch.allclose(grads.mean(0), batch, atol=1e-6)


def test_the_woodbury_influence_equals_a_direct_solve():
    torch.manual_seed(0)
    model = Transformer(TINY)
    train, test = random_windows(12), random_windows(3, seed=1)
    scores = tda.influence(model, train, test, damping=0.5)
    rows = tda.gradients(model, train, tda.sampled_targets(model, train)).double()
    fisher = rows.T @ rows / len(train)
    d = 0.5 * fisher.trace().item() / min(len(train), fisher.shape[0])  # the mean nonzero eigenvalue
    direct = tda.gradients(model, train).double() @ torch.linalg.solve(
        fisher + d * torch.eye(fisher.shape[0], dtype=torch.float64), tda.gradients(model, test).double().T
    )
    assert torch.allclose(scores.double(), direct.T, rtol=1e-3, atol=1e-3 * direct.abs().max().item())


def test_retraining_without_windows_never_sees_them_and_is_otherwise_the_same_run():
    schedule = tda.Schedule(TINY, epochs=1, batch_size=4, checkpoint_epochs=(1,))
    windows = random_windows(8)
    first, again = tda.train_windows(windows, schedule), tda.train_windows(windows, schedule)
    assert first.losses == again.losses and len(first.checkpoints) == 1
    # with every window but the first batch's removed... a different run from the first step
    without = tda.train_windows(windows, schedule, removed=tda.batch_order(8, schedule)[0].tolist())
    assert len(without.losses) == 1 and without.losses[0] != first.losses[0]


@pytest.mark.parametrize("method", ["tracin", "influence"])
def test_both_methods_rank_the_windows_that_hold_a_planted_string_first(method):
    artefact = b"QZXJ-QZXJ-"
    schedule = tda.Schedule(TINY, epochs=12, batch_size=8, lr=1e-2, checkpoint_epochs=(3, 6, 9, 12), seed=0)
    planted = [2, 9, 17, 30]
    train = tda.plant(random_windows(48), artefact, planted, seed=0)
    trained = tda.train_windows(train, schedule)
    test = tda.plant(random_windows(2, seed=5), artefact, [0, 1], seed=1)
    scores = (
        tda.tracin(trained, train, test) if method == "tracin" else tda.influence(trained.model, train, test)
    )
    assert scores.shape == (2, 48)
    assert tda.planted_recall(scores, planted).mean() >= 0.75


def test_a_retraining_run_comes_back_from_its_record_without_training(monkeypatch, tmp_path):
    from resid.train import records

    monkeypatch.setenv(records.ENV, str(tmp_path / "records"))
    monkeypatch.delenv(records.RETRAIN_ENV, raising=False)
    schedule = tda.Schedule(TINY, epochs=2, batch_size=4, checkpoint_epochs=(2,))
    train, test = random_windows(12), random_windows(3, seed=1)
    trained = tda.retrained_losses(train, schedule, [5, 2], test)
    key, config = tda.run_key(train, schedule, [2, 5])  # the removed rows are a set
    record = records.read(key)
    assert record["config"] == json.loads(json.dumps(config, default=str)) and record["history"]

    def no_training(*args, **kwargs):
        raise AssertionError("trained, although the record holds the losses")

    monkeypatch.setattr(tda, "train_windows", no_training)
    assert torch.equal(tda.retrained_losses(train, schedule, [2, 5], test), trained)  # exact
    # another removed set, another schedule or other training windows is another run
    assert len({tda.run_key(train, schedule, [2])[0], tda.run_key(random_windows(12, seed=2), schedule)[0],
                tda.run_key(train, tda.Schedule(TINY, epochs=3), [2, 5])[0], key}) == 4  # fmt: skip
    with pytest.raises(AssertionError, match="trained"):  # new test windows need the weights
        tda.retrained_losses(train, schedule, [2, 5], test[:2])
    path = records.json_path(key)
    path.write_text(path.read_text()[:40])
    with pytest.raises(records.RecordError, match=path.name):  # one line naming the damaged file
        tda.retrained_losses(train, schedule, [2, 5], test)
