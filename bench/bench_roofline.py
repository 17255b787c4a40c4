"""How close the pretrained-model chapters' sweeps run to this CPU's own matrix-multiply speed.

Each line is a sweep a chapter spends its minutes on: its floating-point operations (counted by
``torch.utils.flop_counter``) per second, as a ratio against a square float32 matrix product
timed in the same run (the rate the CPU's BLAS reaches at all). A ratio near 1 means the sweep
already costs what its arithmetic does: only less arithmetic (fewer prompts, positions, draws)
or a cheaper number format makes it faster, and the last line measures the format. The sweeps:
Patching's head sweep (every head of SmolLM2 zero-ablated in turn, on its 24 IOI prompts), Heads'
outlier-dimension ablation (Gemma-3-270M, 16 windows of 128 tokens, every boundary ablated,
each token's loss over the 262,144-token vocabulary) and a plain SmolLM2 forward pass.
"""

from collections.abc import Callable

import torch
from timing import best_time
from torch.utils.flop_counter import FlopCounterMode

import resid
from resid.model import data
from resid.tools import behaviours, dimensions, patching


def flops_of(fn: Callable[[], object]) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def rate(fn: Callable[[], object], repeats: int = 1) -> tuple[float, float]:
    """(GFLOP/s, seconds) of ``fn``: its counted operations over its best time."""
    flops = flops_of(fn)
    seconds = best_time(fn, repeats=repeats)
    return flops / seconds / 1e9, seconds


def matmul_rate(dtype: torch.dtype, n: int = 2048) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    return 2 * n**3 / best_time(lambda: a @ b, repeats=5) / 1e9


def main() -> None:
    torch.manual_seed(0)
    peak = matmul_rate(torch.float32)
    print(f"threads={torch.get_num_threads()}; float32 product of 2048^2 matrices: {peak:.0f} GFLOP/s")

    smol = resid.load("smollm2-135m")
    ioi = behaviours.ioi_prompts(smol.tokenizer, 24)
    metric = patching.LogitDiff(ioi.answers, ioi.foils)

    def head_sweep(model: torch.nn.Module) -> object:
        return patching.patch_heads(model, ioi.tokens, ioi.counterfactual, metric, "zero")

    with torch.no_grad():
        sweep, sweep_s = rate(lambda: head_sweep(smol))
        forward, _ = rate(lambda: smol(ioi.tokens.repeat(smol.cfg.n_heads, 1)), repeats=3)
    print(f"patching: SmolLM2 head sweep, zero ablation ({sweep_s:.0f} s): {sweep / peak:.2f} of its rate")
    print(f"SmolLM2 forward pass on the sweep's batch:        {forward / peak:.2f} of its rate")

    gemma = resid.load("gemma3-270m")
    ids = data.token_ids(data.corpus("pydoc")[:300_000], gemma.tokenizer)
    windows = data.windows(ids, 128, 16, seed=0, bos=data.leading_bos(gemma.tokenizer))
    dims = [87, 163, 400]  # Gemma-3-270M's outlier dimensions, as the Heads chapter finds them
    with torch.no_grad():
        ablation, ablation_s = rate(lambda: dimensions.ablated_losses(gemma, windows, dims))
    print(f"heads: Gemma-3-270M outlier ablation ({ablation_s:.0f} s): {ablation / peak:.2f} of its rate")

    half = resid.load("smollm2-135m", dtype=torch.bfloat16)
    with torch.no_grad():
        half_s = best_time(lambda: head_sweep(half), repeats=1)
    print(
        f"the SmolLM2 head sweep in bfloat16: {sweep_s / half_s:.2f}x faster than in float32 "
        "(bench_forward.py says whether this CPU has bf16 units)"
    )


if __name__ == "__main__":
    main()
