"""Training throughput at the privileged-basis regime's size (d_model 256, 4 layers, context
128, batch 32): resid's trainer against a plain PyTorch loop, in one run.

Prints tokens/s of the plain loop (the reference) and of resid's trainer in float32, with its
forward compiled by ``torch.compile``, and with ``TrainConfig(precision="bfloat16")`` (bf16
autocast); each as a ratio to the reference (> 1: faster) and as a fraction of this machine's
measured matmul rate in that precision.
"""

import time
from dataclasses import replace

import torch
import torch.nn.functional as F

from resid.model import Config, Transformer
from resid.model.data import random_batch
from resid.train.experiments import REGIME
from resid.train.training import TrainConfig, _train_step, corpus_ids, make_optimizer

STEPS, WARMUP = 30, 5


def matmul_flops(dtype: torch.dtype, n: int = 1024, repeats: int = 20) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def step_flops(cfg: Config, batch: int) -> float:
    """6 x parameters x tokens for the matrices, plus attention scores and values (forward x 3)."""
    model = Transformer(cfg)
    matrices = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and n != "pos_embed.weight")
    tokens = batch * cfg.n_ctx
    attention = 2 * 2 * cfg.n_layers * cfg.n_ctx * cfg.d_model * tokens  # QK^T and PV, forward
    return 6 * matrices * tokens + 3 * attention


def time_steps(step) -> float:
    for i in range(WARMUP):
        step(i)
    start = time.perf_counter()
    for i in range(WARMUP, WARMUP + STEPS):
        step(i)
    return (time.perf_counter() - start) / STEPS


def main() -> None:
    cfg: TrainConfig = REGIME
    train_ids, _ = corpus_ids(cfg)
    tokens_per_step = cfg.batch_size * cfg.model.n_ctx

    torch.manual_seed(0)
    model = Transformer(cfg.model)
    optimizer = make_optimizer(model, cfg)
    ours = time_steps(
        lambda i: _train_step(model, model, optimizer, train_ids, cfg, i, 0, 1, torch.device("cpu"))
    )

    torch.manual_seed(0)
    reference_model = Transformer(cfg.model)
    reference_opt = torch.optim.AdamW(
        reference_model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=0.1
    )

    def reference_step(i: int) -> None:
        batch = random_batch(train_ids, cfg.batch_size, cfg.model.n_ctx + 1, seed=i)
        logits = reference_model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        reference_opt.zero_grad()
        loss.backward()
        reference_opt.step()

    reference = time_steps(reference_step)

    half = replace(cfg, precision="bfloat16")
    bf16 = time_steps(
        lambda i: _train_step(model, model, optimizer, train_ids, half, i, 0, 1, torch.device("cpu"))
    )
    compiled_forward = torch.compile(model)  # the first warm-up steps compile it
    compiled = time_steps(
        lambda i: _train_step(
            compiled_forward, model, optimizer, train_ids, cfg, i, 0, 1, torch.device("cpu")
        )
    )
    peak32, peak16 = matmul_flops(torch.float32), matmul_flops(torch.bfloat16)
    flops = step_flops(cfg.model, cfg.batch_size)
    print(f"threads={torch.get_num_threads()} model d={cfg.model.d_model} L={cfg.model.n_layers} "
          f"ctx={cfg.model.n_ctx} batch={cfg.batch_size}; matmul peak fp32 {peak32 / 1e9:.0f} GFLOP/s, "
          f"bf16 {peak16 / 1e9:.0f} GFLOP/s")  # fmt: skip
    print(f"plain PyTorch loop:   {tokens_per_step / reference:8,.0f} tokens/s (reference), "
          f"{flops / reference / peak32:.1%} of fp32 peak")  # fmt: skip
    print(f"resid trainer:        {tokens_per_step / ours:8,.0f} tokens/s  ratio {reference / ours:.2f}x, "
          f"{flops / ours / peak32:.1%} of fp32 peak")  # fmt: skip
    print(f"resid, torch.compile: {tokens_per_step / compiled:8,.0f} tokens/s  "
          f"ratio {reference / compiled:.2f}x, {flops / compiled / peak32:.1%} of fp32 peak")  # fmt: skip
    print(f"resid, bf16 autocast: {tokens_per_step / bf16:8,.0f} tokens/s  ratio {reference / bf16:.2f}x, "
          f"{flops / bf16 / peak16:.1%} of bf16 peak")  # fmt: skip


if __name__ == "__main__":
    main()
