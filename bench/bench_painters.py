"""Layer-surgery sweep: shared-prefix execution against naive full recomputation, in one run.

The plan list is the painters chapter's default sweep (every variant at every N, the random
orders, single-layer skips and swaps, the looped-parallel grid). The naive reference runs each
plan from the embedding on, for each task separately, through the full unembedding; resid's
``score_plans`` computes each shared prefix once, shares forward passes between tasks on the
same tokens, and unembeds only the scored positions. Tasks are shrunk (fewer items) so the
naive side finishes in minutes; the speed-up depends on the plan list, not on the item count.

It computes in the chapter's default dtype, bfloat16; on a CPU without bf16 matrix units (see
``bench_forward.py``) that takes hours, and ``--dtype float32`` measures the same sweep there.
"""

import argparse
import time

import torch
import torch.nn.functional as F

import resid
from resid.runtime import progress
from resid.tools import plans, tasks


def chapter_plans(T: int, n_grid=(4, 8, 12), n_shuffles: int = 10, max_loops: int = 8) -> list:
    out = [plan for *_, plan in plans.paper_sweep(T, list(n_grid), n_shuffles)]
    for n in n_grid:
        out += [plans.parallel(T, n, T - n - 1, loops=k) for k in range(1, max_loops + 1)]  # k=1: parallel
    out += [plans.skip(T, i, i) for i in range(T)] + [plans.swap(T, i) for i in range(T - 1)]
    return list(dict.fromkeys(out))  # the loop grid repeats two variants; naive must not pay twice


def layer_evaluations(plan_list: list, shared: bool) -> int:
    """Block calls per row of tokens: what prefix sharing saves, independent of the machine."""
    unrolled = [[s.layers for s in plan for _ in range(s.loops)] for plan in plan_list]
    total, previous = 0, []
    for plan in sorted(unrolled) if shared else unrolled:
        common = 0
        while shared and common < min(len(plan), len(previous)) and plan[common] == previous[common]:
            common += 1
        total += sum(len(layers) for layers in plan[common:])
        previous = plan
    return total


def naive(model, suite, plan_list) -> None:
    for plan in progress.steps(plan_list, "naive: plans", show=True):
        for task in suite:
            logits = plans.run_plan(model, task.tokens, plan).float()
            logprob = F.log_softmax(logits[task.rows, task.positions], -1)
            logprob = logprob.gather(-1, task.targets[:, None]).squeeze(-1)
            task.score(logprob, logits[task.rows, task.positions].argmax(-1) == task.targets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    dtype = parser.parse_args().dtype
    model = resid.load("smollm2-135m", dtype=getattr(torch, dtype))
    T = model.cfg.n_layers
    suite = tasks.decoder_suite(model, n_items=20, n_windows=2)
    suite = [t for t in suite if t.name not in ("word problem", "two-step problem")]  # dropped in the chapter
    plan_list = chapter_plans(T)
    start = time.perf_counter()
    with torch.no_grad():
        tasks.score_plans(model, suite, plan_list, progress=True)
    t_shared = time.perf_counter() - start
    start = time.perf_counter()
    with torch.no_grad():
        naive(model, suite, plan_list)
    t_naive = time.perf_counter() - start
    ratio_layers = layer_evaluations(plan_list, shared=False) / layer_evaluations(plan_list, shared=True)
    n_tokens = sum(t.tokens.numel() for t in suite)
    print(f"{len(plan_list)} plans x {len(suite)} tasks ({n_tokens:,} tokens), in {dtype}")
    print(f"naive recomputation: {t_naive:.1f} s (reference)")
    print(f"resid score_plans:   {t_shared:.1f} s  speed-up {t_naive / t_shared:.2f}x")
    print(f"block evaluations saved by prefix sharing alone: {ratio_layers:.2f}x")


if __name__ == "__main__":
    main()
