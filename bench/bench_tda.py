"""Training data attribution's cost per training window against one training step, in one run.

A TracIn score needs one loss gradient per training window at every checkpoint (one window at a
time); the influence function needs two per window (one with the text's targets, one with
targets sampled from the model) and an n x n solve; retraining, the ground truth both are
checked against, is a whole training run per removal. Prints each method's time per training
window and per test window scored, and a retraining's, as ratios against one training step
(a batch of 32 windows, forward and backward) of the TDA chapter's model.
"""

import torch
from timing import best_time

from resid.model import Config, Transformer, data, next_token_loss
from resid.tools import tda

MODEL = Config(vocab_size=256, n_ctx=64, d_model=64, n_layers=2, n_heads=4, d_mlp=256)


def main() -> None:
    torch.manual_seed(0)
    ids = data.token_ids(data.corpus("pydoc"), data.ByteTokenizer())
    train = data.windows(ids, MODEL.n_ctx + 1, 128, seed=0)
    test = data.windows(ids, MODEL.n_ctx + 1, 4, seed=1)
    model = Transformer(MODEL)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def step() -> None:
        loss = next_token_loss(model(train[:32, :-1]), train[:32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    schedule = tda.Schedule(MODEL, epochs=4, checkpoint_epochs=(1, 2, 3, 4))
    trained = tda.train_windows(train, schedule)
    t_step = best_time(step)
    t_tracin = best_time(lambda: tda.tracin(trained, train, test), repeats=1)
    t_influence = best_time(lambda: tda.influence(trained.model, train, test), repeats=1)
    t_retrain = best_time(lambda: tda.train_windows(train, schedule, removed=range(8)), repeats=1)
    n, steps = len(train), len(trained.losses)
    n_parameters = sum(p.numel() for p in model.parameters())
    print(f"threads={torch.get_num_threads()} training windows={n} test windows={len(test)} "
          f"checkpoints={len(trained.checkpoints)} parameters={n_parameters:,}")  # fmt: skip
    print(f"one training step (32 windows): {t_step * 1000:.0f} ms (reference)")
    for name, seconds in (("TracIn", t_tracin), ("influence", t_influence)):
        label, per_window = f"{name}, per training window:", seconds / n
        print(f"{label:32s}{per_window * 1000:.1f} ms  ratio {per_window / t_step:.2f}x")
    print(f"one retraining ({steps} steps):  {t_retrain:.1f} s  ratio {t_retrain / t_step:.0f}x")


if __name__ == "__main__":
    main()
