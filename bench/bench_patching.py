"""Activation-patching sweeps on SmolLM2's IOI prompts: batched against one forward per patch.

The naive reference patches one head (or one layer x position of the residual stream) at a
time with a hook and runs the whole model. ``resid.patching`` runs every patch of a layer in
one batch that starts from the cached residual stream at that layer; a residual patch at
position p also keeps the clean keys and values of the positions before p and recomputes only
the positions from p on; a patch whose replacement equals the clean value (IOI's name-swap
counterfactual differs from the clean prompt only from S2 on, so every activation before S2 is
the clean one) is not run at all, and a head patch reruns only the positions from the first one
its replacement changes. Also printed: EAP's time for all edges against exact patching, one
forward per edge (measured on a sample, scaled).
"""

import time

import torch

import resid
from resid.tools import behaviours, patching


def timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main(n_prompts: int = 8, n_edges: int = 40) -> None:
    torch.manual_seed(0)
    model = resid.load("smollm2-135m")
    ioi = behaviours.ioi_prompts(model.tokenizer, 24)
    clean, counter = ioi.tokens[:n_prompts], ioi.counterfactual[:n_prompts]
    metric = patching.LogitDiff(ioi.answers[:n_prompts], ioi.foils[:n_prompts])
    patching.patch_heads(model, clean, counter, metric)  # warm-up

    naive_heads_s, naive_heads = timed(patching.patch_heads_naive, model, clean, counter, metric)
    batched_heads_s, batched_heads = timed(patching.patch_heads, model, clean, counter, metric)
    assert torch.allclose(naive_heads, batched_heads, atol=1e-3), "the two head sweeps disagree"
    naive_resid_s, naive_resid = timed(patching.patch_residual_naive, model, clean, counter, metric)
    batched_resid_s, batched_resid = timed(patching.patch_residual, model, clean, counter, metric)
    assert torch.allclose(naive_resid, batched_resid, atol=1e-3), "the two residual sweeps disagree"

    graph = patching.Graph.of(model)
    eap_s, _ = timed(patching.edge_attribution_patching, model, clean, counter, metric)
    edges = [
        tuple(e) for e in graph.allowed.nonzero()[torch.randperm(int(graph.allowed.sum()))[:n_edges]].tolist()
    ]
    exact_s, _ = timed(patching.edge_patching, model, clean, counter, metric, edges)
    all_edges = int(graph.allowed.sum())

    n_heads = model.cfg.n_layers * model.cfg.n_heads
    n_cells = model.cfg.n_layers * clean.shape[1]
    print(f"SmolLM2, {n_prompts} IOI prompts of {clean.shape[1]} tokens, {torch.get_num_threads()} threads")
    print(
        f"head patching ({n_heads} heads):            naive {naive_heads_s:6.1f} s, batched "
        f"{batched_heads_s:6.1f} s"
        f"  -> speed-up {naive_heads_s / batched_heads_s:.2f}x"
    )
    print(
        f"residual patching ({n_cells} layer x position): naive {naive_resid_s:6.1f} s, batched "
        f"{batched_resid_s:6.1f} s  -> speed-up {naive_resid_s / batched_resid_s:.2f}x"
    )
    print(
        f"edges ({all_edges}): EAP {eap_s:.1f} s for all; exact {exact_s / n_edges:.3f} s per edge, "
        f"{exact_s / n_edges * all_edges:.0f} s for all -> EAP is "
        f"{exact_s / n_edges * all_edges / eap_s:.0f}x faster"
    )


if __name__ == "__main__":
    main()
