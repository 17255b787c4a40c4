"""Attribution, patching, edges and head scores on tiny random models, where the right answer
is known exactly."""

from dataclasses import replace

import pandas as pd
import pytest
import torch

from resid.model import Config, Transformer
from resid.model.cache import Head
from resid.tools import attribution, circuits, heads, patching
from resid.tools.behaviours import ContrastSet
from resid.train import PRESETS, train

ARCHITECTURES = {
    "gpt2-like": Config(n_ctx=16, d_model=32, n_layers=2, n_heads=4, d_mlp=64, bias=True),
    "llama-like": Config(
        n_ctx=16,
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_mlp=64,
        norm="rmsnorm",
        mlp="swiglu",
        positional="rotary",
        tie_embeddings=False,
    ),
    "attn-only": Config(n_ctx=16, d_model=32, n_layers=2, n_heads=4, attn_only=True),
}


def random_model(cfg: Config, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(cfg).double().eval()
    with torch.no_grad():  # larger weights than the init, so that every component matters
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def prompts(seed: int, n: int = 3, length: int = 8) -> torch.Tensor:
    return torch.randint(0, 256, (n, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(params=list(ARCHITECTURES))
def model(request) -> Transformer:
    return random_model(ARCHITECTURES[request.param])


def test_graph_forward_is_the_forward_pass_and_all_corrupted_is_the_corrupted_run(model):
    clean, corrupt = prompts(0), prompts(1)
    graph = patching.Graph.of(model)
    logits, _, _ = patching.graph_forward(model, clean, torch.ones(graph.allowed.shape, dtype=torch.double))
    torch.testing.assert_close(logits, model(clean)[:, -1])
    corrupted = patching.corrupted_outputs(model, corrupt)
    logits, _, _ = patching.graph_forward(
        model, clean, torch.zeros(graph.allowed.shape, dtype=torch.double), corrupted
    )
    torch.testing.assert_close(logits, model(corrupt)[:, -1])


def test_split_query_key_value_edges_add_up_to_the_head_edge(model):
    clean, corrupt = prompts(0), prompts(1)
    graph, split = patching.Graph.of(model), patching.Graph.of(model, split_qkv=True)
    assert len(split.downstream) == len(graph.downstream) + 2 * model.cfg.n_layers * model.cfg.n_heads
    logits, _, _ = patching.graph_forward(model, clean, torch.ones(split.allowed.shape), split_qkv=True)
    torch.testing.assert_close(logits, model(clean)[:, -1])
    corrupted = patching.corrupted_outputs(model, corrupt)
    # the edge embed -> L1H2 corrupted whole, and as its three parts
    whole = graph.allowed.double()
    whole[0, graph.downstream.index("L1H2")] = 0
    parts = split.allowed.double()
    for part in "qkv":
        parts[0, split.downstream.index(f"L1H2.{part}")] = 0
    torch.testing.assert_close(
        patching.graph_forward(model, clean, parts, corrupted, split_qkv=True)[0],
        patching.graph_forward(model, clean, whole, corrupted)[0],
    )
    metric = patching.LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    through_query = patching.path_patching(model, clean, corrupt, metric, ["embed", "L0H1"], ["L1H2.q"])
    through_head = patching.path_patching(model, clean, corrupt, metric, ["embed", "L0H1"], ["L1H2"])
    assert through_query.shape == (2,) and not torch.allclose(through_query, through_head)
    assert not through_head.requires_grad  # an inference-only measurement: plotted with .numpy()
    for spelling in (Head(1, 2), (1, 2)):  # a head in any spelling is the same node
        as_head = patching.path_patching(model, clean, corrupt, metric, ["embed", Head(0, 1)], [spelling])
        torch.testing.assert_close(as_head, through_head)
    unchanged = patching.path_patching(model, clean, clean, metric, ["embed", "L0H1"], ["L1H2.q"])
    torch.testing.assert_close(unchanged, torch.zeros(2), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="no node"):
        patching.path_patching(model, clean, corrupt, metric, ["embed"], ["L1H9.q"])


def test_patching_the_clean_activation_changes_nothing(model):
    tokens = prompts(0)
    answers, foils = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    metric = patching.LogitDiff(answers, foils)
    clean_value = metric(model(tokens)[:, -1]).mean()
    names = [f"blocks.{i}.attn.hook_z" for i in range(2)] + [f"blocks.{i}.hook_resid_pre" for i in range(2)]
    _, cache = model.run_with_cache(tokens, names)
    for patched_in in (tokens, cache):  # the clean prompts as counterfactual, or their cache
        torch.testing.assert_close(
            patching.patch_heads(model, tokens, patched_in, metric), clean_value.expand(2, 4).float()
        )
        torch.testing.assert_close(
            patching.patch_residual(model, tokens, patched_in, metric), clean_value.expand(2, 8).float()
        )


def test_sweeps_name_a_bad_intervention_or_a_missing_activation_before_they_run(model):
    tokens, metric = prompts(0), patching.LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    with pytest.raises(ValueError, match="no intervention 'ablate'"):
        patching.patch_heads(model, tokens, prompts(1), metric, "ablate")
    with pytest.raises(ValueError, match="have no 'blocks.0.hook_resid_pre'"):
        patching.patch_residual(model, tokens, {}, metric)
    with pytest.raises(ValueError, match="counterfactual"):
        patching.patch_residual(model, tokens, prompts(1)[:, :5], metric)
    with pytest.raises(ValueError, match="counterfactual"):  # a resample pairs prompt with prompt
        patching.patch_heads(model, tokens, torch.cat([prompts(1), prompts(2)]), metric)


def test_a_mean_ablation_may_average_over_a_larger_set(model):
    clean, reference = prompts(0), torch.cat([prompts(1), prompts(2)])  # 3 clean, 6 reference prompts
    metric = patching.LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    names = [f"blocks.{i}.attn.hook_z" for i in range(2)]
    _, cache = model.run_with_cache(reference, names)
    means = {n: cache[n].mean(0, keepdim=True).expand(3, *cache[n].shape[1:]) for n in names}
    torch.testing.assert_close(
        patching.patch_heads(model, clean, reference, metric, "mean"),
        patching.patch_heads(model, clean, means, metric),
    )


def test_patching_every_position_with_the_corrupted_run_gives_the_corrupted_logits(model):
    clean, corrupt = prompts(0), prompts(1)
    _, cache = model.run_with_cache(corrupt, ["blocks.1.hook_resid_pre"])
    patched = model.run_with_hooks(clean, [("blocks.1.hook_resid_pre", lambda x, hook: cache[hook.name])])
    torch.testing.assert_close(patched, model(corrupt))
    # and the batched sweep's single-position patches agree with one-at-a-time hooks
    metric = patching.KLFromReference(model(clean)[:, -1])
    sweep = patching.patch_residual(model, clean, corrupt, metric)

    def at_position(x, hook, p=3):
        x = x.clone()
        x[:, p] = cache["blocks.1.hook_resid_pre"][:, p]
        return x

    one = metric(model.run_with_hooks(clean, [("blocks.1.hook_resid_pre", at_position)])[:, -1]).mean()
    torch.testing.assert_close(sweep[1, 3], one.float())


def test_batched_head_patching_matches_one_forward_per_head(model):
    clean, corrupt = prompts(0), prompts(1)
    metric = patching.LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    names = [f"blocks.{i}.attn.hook_z" for i in range(2)]
    values = patching.interventions(model, clean, corrupt, names)
    for kind in patching.INTERVENTIONS:
        batched = patching.patch_heads(model, clean, corrupt, metric, kind, chunk=5)
        naive = patching.patch_heads_naive(model, clean, corrupt, metric, kind)
        torch.testing.assert_close(batched, naive)
        # the values built inside the sweep are the ones interventions() shows
        torch.testing.assert_close(patching.patch_heads(model, clean, values[kind], metric, chunk=5), batched)
        assert not torch.allclose(batched, batched[0, 0])  # heads differ: the test can fail


def test_per_prompt_sweeps_average_to_the_mean_sweeps_and_match_a_prompt_run_alone(model):
    clean, corrupt = prompts(0), prompts(1)
    answers, foils = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    metric = patching.LogitDiff(answers, foils)
    for sweep in (patching.patch_heads, patching.patch_residual):
        per_prompt = sweep(model, clean, corrupt, metric, per_prompt=True)
        assert per_prompt.shape[-1] == 3
        torch.testing.assert_close(per_prompt.mean(-1), sweep(model, clean, corrupt, metric))
        alone = sweep(model, clean[1:2], corrupt[1:2], patching.LogitDiff(answers[1:2], foils[1:2]))
        torch.testing.assert_close(per_prompt[..., 1], alone)
    graph = patching.Graph.of(model)
    edges = [tuple(e) for e in graph.allowed.nonzero()[:3].tolist()]
    per_edge = patching.edge_patching(model, clean, corrupt, metric, edges, per_prompt=True)
    torch.testing.assert_close(
        per_edge.mean(-1), patching.edge_patching(model, clean, corrupt, metric, edges)
    )
    kept = graph.allowed & (torch.rand(graph.allowed.shape, generator=torch.Generator().manual_seed(0)) < 0.5)
    per_prompt = patching.circuit_metric(model, clean, corrupt, metric, kept, per_prompt=True)
    assert per_prompt.shape == (3,)
    mean = patching.circuit_metric(model, clean, corrupt, metric, kept)
    assert per_prompt.mean().item() == pytest.approx(mean)
    # a stack of circuits is each circuit alone; keeping every edge is the clean run
    stacked = patching.circuit_metric(model, clean, corrupt, metric, torch.stack([kept, graph.allowed]))
    assert stacked.shape == (2,)
    assert stacked[0].item() == pytest.approx(per_prompt.mean().item(), rel=1e-5)
    assert stacked[1].item() == pytest.approx(metric(model(clean)[:, -1]).mean().item(), rel=1e-4)


def test_integrated_gradients_are_complete(model):
    frame, check = attribution.input_attributions(model, prompts(0, n=1)[0], target=7, foil=9, ig_steps=64)
    assert check["relative error"] < 0.01
    assert frame["occlusion"].iloc[:-1].notna().all() and frame["gradient norm"].gt(0).all()


def test_occlusion_deletes_one_token_and_reruns_the_shorter_prompt(model):
    tokens = prompts(0, n=1)[0]
    for skip_first in (False, True):
        frame, _ = attribution.input_attributions(model, tokens, 7, 9, ig_steps=4, skip_first=skip_first)
        with torch.no_grad():
            logits = model(tokens[None])[0, -1]
            full = (logits[7] - logits[9]).item()
            for i in range(len(tokens)):
                occluded = frame["occlusion"].iloc[i]
                if i == len(tokens) - 1 or (skip_first and i == 0):  # the prediction's token; the BOS
                    assert pd.isna(occluded)
                    continue
                alone = model(torch.cat([tokens[:i], tokens[i + 1 :]])[None])[0, -1]
                assert occluded == pytest.approx(full - (alone[7] - alone[9]).item(), abs=1e-4)


def test_the_baseline_puts_the_mean_token_embedding_scaled_as_the_model_scales_it():
    cfg = replace(ARCHITECTURES["llama-like"], embed_scale=32**0.5)  # rotary: no position in the embedding
    model = random_model(cfg)
    tokens = prompts(0, n=1)[0][None]
    baseline = attribution.mean_embedding_baseline(model, tokens, keep_first=True)
    expected = model.embed.weight.mean(0) * cfg.embed_scale
    torch.testing.assert_close(baseline[0, 1:], expected.expand(tokens.shape[1] - 1, -1))
    torch.testing.assert_close(baseline[0, 0], model.embed_tokens(tokens)[0, 0])


def test_smoothgrad_without_noise_is_the_gradient_norm(model):
    tokens = prompts(0, n=1)[0]
    frame, _ = attribution.input_attributions(model, tokens, target=7, foil=9, ig_steps=4)
    plain = attribution.smoothgrad(model, tokens, 7, 9, n_samples=2, noise=0.0)
    torch.testing.assert_close(plain, torch.tensor(frame["gradient norm"].tolist(), dtype=plain.dtype))
    noisy = attribution.smoothgrad(model, tokens, 7, 9, n_samples=8, noise=0.5)
    assert noisy.shape == plain.shape and not torch.allclose(noisy, plain)


def test_value_weighted_attention_is_the_pattern_times_the_moved_norm_for_one_head():
    model = random_model(Config(n_ctx=16, d_model=32, n_layers=2, n_heads=1, d_mlp=64, bias=True))
    tokens = prompts(0)
    maps = attribution.value_weighted_attention(model, tokens)  # [layer, batch, query, key]
    _, cache = model.run_with_cache(tokens, ["blocks.1.attn.hook_pattern", "blocks.1.attn.hook_v"])
    attn = model.blocks[1].attn
    moved = attn.head_results(cache["blocks.1.attn.hook_v"])[:, :, 0].norm(dim=-1)  # [batch, key]
    expected = cache["blocks.1.attn.hook_pattern"][:, 0] * moved[:, None, :]
    torch.testing.assert_close(maps[1], expected.float())
    rollout = attribution.attention_rollout(maps)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(3, 8))  # shares of each position sum to one
    assert torch.all(rollout.triu(1) == 0)  # causal: nothing comes from later positions


def test_direct_logit_attributions_sum_to_the_logit(model):
    tokens = prompts(0)
    frame, check = attribution.direct_logit_attribution(
        model, tokens, torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    )
    assert check["sum of contributions"] == pytest.approx(check["model logit"], rel=1e-5, abs=1e-6)
    labels, parts = attribution.residual_components(model, tokens)
    _, cache = model.run_with_cache(tokens, [model.resid_names()[-1]])
    torch.testing.assert_close(parts.sum(0), cache[model.resid_names()[-1]][:, -1])
    lens = attribution.logit_lens(model, tokens, torch.tensor([1, 2, 3]))
    assert len(lens) == model.cfg.n_layers + 1
    # the last boundary read through the lens is the model's own output
    per_prompt = attribution.logit_lens(model, tokens, torch.tensor([1, 2, 3]), per_prompt=True)
    assert len(per_prompt) == 3 * len(lens)
    means = per_prompt.groupby("layer").mean().drop(columns="prompt").reset_index()
    pd.testing.assert_frame_equal(means, lens)
    top1 = (model(tokens)[:, -1].argmax(-1) == torch.tensor([1, 2, 3])).float()
    assert per_prompt[per_prompt.layer == model.cfg.n_layers]["top-1 accuracy"].tolist() == top1.tolist()


def test_eap_equals_exact_patching_where_the_metric_is_linear_in_the_edge():
    model = random_model(ARCHITECTURES["gpt2-like"])
    model.ln_final = None  # the logits become linear in what the logits node reads
    clean, corrupt = prompts(0), prompts(1)
    metric = patching.LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    scores = patching.edge_attribution_patching(model, clean, corrupt, metric)
    graph = patching.Graph.of(model)
    into_logits = [(u, len(graph.downstream) - 1) for u in range(len(graph.upstream))]
    exact = patching.edge_patching(model, clean, corrupt, metric, into_logits)
    torch.testing.assert_close(scores[:, -1], exact.float(), rtol=1e-5, atol=1e-6)
    # EAP-IG averages gradients along a line of inputs; into the logits they are all the same
    integrated = patching.edge_attribution_patching(model, clean, corrupt, metric, ig_steps=3)
    torch.testing.assert_close(integrated[:, -1], scores[:, -1], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(integrated[:, :-1], scores[:, :-1])
    into_heads = [(0, 0), (1, model.cfg.n_heads)]  # nonlinear there: EAP is only an estimate
    assert not torch.allclose(
        scores[tuple(zip(*into_heads, strict=True))],
        patching.edge_patching(model, clean, corrupt, metric, into_heads).float(),
    )


def test_acdc_keeps_everything_at_zero_threshold_and_nothing_at_infinity():
    model = random_model(ARCHITECTURES["attn-only"])
    clean, corrupt = prompts(0), prompts(1)
    allowed = patching.Graph.of(model).allowed
    kept, passes = patching.acdc(model, clean, corrupt, threshold=-1.0)
    assert torch.equal(kept, allowed) and passes == int(allowed.sum())
    kept, _ = patching.acdc(model, clean, corrupt, threshold=float("inf"))
    assert not kept.any()
    into_logits = torch.zeros_like(allowed)
    into_logits[:, -1] = True
    kept, passes = patching.acdc(model, clean, corrupt, threshold=-1.0, candidates=into_logits)
    assert torch.equal(kept, allowed & into_logits) and passes == int((allowed & into_logits).sum())


def test_induction_heads_form_in_a_two_layer_attention_only_model(tmp_path):
    cfg = replace(PRESETS["induction-2l"], eval_every=100)
    tokens = heads.repeated_tokens(16, 15, 256, seed=1)
    untrained = Transformer(cfg.model).eval()
    assert heads.head_scores(untrained, tokens, period=15)["induction"].max() < 0.2
    model = train(cfg, progress=False, stop_after=500).model  # the bump comes at about 350 steps
    scores = heads.head_scores(model, tokens, period=15)
    assert scores["induction"].max() > 0.6
    first, second = heads.in_context_losses(model, tokens, start=15)
    assert second < first / 2
    top = scores.loc[scores["induction"].idxmax()]
    assert top["layer"] == 1  # induction needs a previous-token head before it
    assert scores[scores.layer == 0]["previous"].max() > 0.5


def test_circuits_and_scores_have_the_right_shapes_and_meaning():
    model = random_model(ARCHITECTURES["llama-like"]).float()
    ids = torch.arange(20)
    assert heads.ov_circuit(model, 1, 2, ids).shape == (20, 20)
    assert heads.qk_circuit(model, 0, 3, ids).shape == (20, 20)
    scores = heads.copy_scores(model, ids)
    assert len(scores) == 8 and scores[["copying", "suppression"]].le(1).all().all()
    effect = heads.attended_token_effect(model, prompts(0).long(), 1, 0)
    assert effect["positions"] > 0
    # per sequence, weighted by each sequence's positions, the same means
    per_prompt = heads.attended_token_effect(model, prompts(0).long(), 1, 0, per_prompt=True)
    weights = per_prompt["positions"] / per_prompt["positions"].sum()
    for name in ("direct effect on attended token", "logit change when ablated"):
        assert (per_prompt[name] * weights).sum().item() == pytest.approx(effect[name], rel=1e-5, abs=1e-6)
    repeated = heads.repeated_tokens(4, 6, 256, seed=0)
    first, repeat = heads.in_context_losses(model, repeated, start=6, per_prompt=True)
    assert first.shape == repeat.shape == (4,)
    assert (first.mean().item(), repeat.mean().item()) == pytest.approx(
        heads.in_context_losses(model, repeated, start=6)
    )
    stream = torch.tensor([1, 2, 1, 2, 1, 3])
    table = heads.bigram_log_probs(stream, 5, rows=torch.tensor([1, 2]), smoothing=0.0)
    assert table[0, 2].exp().item() == pytest.approx(2 / 3) and table[1, 1].exp().item() == pytest.approx(1.0)
    assert heads.direct_path_logits(model, ids).shape == (20, 256)


def synthetic_ioi(n: int = 6, seed: int = 0) -> ContrastSet:
    """Random token prompts with IOI-like marked positions: enough to check the bookkeeping."""
    tokens = prompts(seed, n=n)
    positions = {"IO": torch.full((n,), 1), "S1": torch.full((n,), 2), "S1+1": torch.full((n,), 3)}
    positions |= {"S2": torch.full((n,), 5), "end": torch.full((n,), 7)}
    return ContrastSet(
        text=[""] * n,
        tokens=tokens,
        answers=tokens[:, 1],
        foils=tokens[:, 2],
        counterfactual=prompts(seed + 1, n=n),
        corruptions={"abc": prompts(seed + 2, n=n)},
        positions=positions,
        group=torch.arange(n) % 3,
    )


def test_the_whole_model_as_a_circuit_is_faithful_and_complete(model):
    ioi = synthetic_ioi()
    means = circuits.head_means(model, ioi.corruptions["abc"])
    everything = circuits.all_heads(model)
    result = circuits.faithfulness(model, ioi, everything, means)
    assert result["faithfulness"] == pytest.approx(1.0) and result["low"] == pytest.approx(1.0)
    table = circuits.completeness(model, ioi, everything, means, {"first two": everything[:2]})
    assert table.gap.abs().max() < 1e-9
    # an empty circuit is the model with every head mean-ablated
    none = circuits.faithfulness(model, ioi, [], means)
    expected = circuits.ablated_logit_diff(model, ioi, everything, means).mean().item()
    assert none["circuit"] == pytest.approx(expected)
    minimal = circuits.minimality(model, ioi, everything[:3], means)
    assert (
        len(minimal) == 3
        and (minimal.low <= minimal["drop"]).all()
        and (minimal["drop"] <= minimal.high).all()
    )


def test_mean_ablation_with_the_prompts_own_mean_of_identical_prompts_changes_nothing(model):
    ioi = synthetic_ioi().subset(torch.zeros(4, dtype=torch.long))  # one prompt, four times
    means = circuits.head_means(model, ioi.tokens)
    full = circuits.ablated_logit_diff(model, ioi, [], means)
    torch.testing.assert_close(
        circuits.ablated_logit_diff(model, ioi, circuits.all_heads(model), means), full
    )


def test_role_evidence_reads_the_marked_positions(model):
    ioi = synthetic_ioi()
    table = circuits.ioi_attention(model, ioi)
    patterns = heads.attention_patterns(model, ioi.tokens)  # [layer, batch, head, query, key]
    row = table[table["head"] == "L1H2"].iloc[0]
    assert row["end→IO"] == pytest.approx(patterns[1, :, 2, 7, 1].mean().item())
    assert row["S2→S1+1"] == pytest.approx(patterns[1, :, 2, 5, 3].mean().item())
    means = circuits.head_means(model, ioi.corruptions["abc"])
    direct = circuits.head_logit_attributions(model, ioi)
    assert direct.shape == (6, model.cfg.n_layers, model.cfg.n_heads)
    frame, totals = circuits.backup_heads(model, ioi, [(1, 0), (1, 3)], means)
    torch.testing.assert_close(totals["direct effect of the ablated heads"], direct[:, 1, [0, 3]].sum(1))
    nothing, _ = circuits.backup_heads(model, ioi, [], means)
    assert nothing.change.abs().max() < 1e-9


def test_ioi_roles_follow_the_definitions_on_hand_made_evidence():
    evidence = pd.DataFrame({
        "end→IO":      [0.6, 0.6, 0.1, 0.6, 0.35, 0.6],
        "end→S1":      [0.1, 0.1, 0.1, 0.1, 0.3, 0.1],
        "end→S2":      [0.1, 0.1, 0.7, 0.1, 0.1, 0.1],
        "copying":     [0.9, 0.0, 0.0, 0.4, 0.9, float("nan")],
        "suppression": [0.0, 0.8, 0.9, 0.0, 0.0, float("nan")],
        "direct":      [1.0, -1.0, 2.0, 1.0, 1.0, 1.0],
    })  # fmt: skip
    roles = circuits.ioi_roles(evidence).tolist()
    # a copier that prefers IO; a suppressor that prefers IO; one that looks at S2 and suppresses;
    # too little copying; too small a preference; copying not measured
    assert roles == ["name mover", "negative name mover", "S suppression", "", "", ""]


def test_prompt_sets_split_by_template_without_overlap():
    ioi = synthetic_ioi(n=9)
    discovery, held_out = ioi.split(0.34, by_group=True)
    assert set(discovery.group.tolist()).isdisjoint(held_out.group.tolist())
    assert len(discovery) + len(held_out) == 9 and held_out.positions["S2"].shape == (len(held_out),)
    with pytest.raises(ValueError):
        ioi.split(1.5)


def test_head_pruning_keeps_all_at_a_negative_threshold_and_none_at_infinity(model):
    ioi = synthetic_ioi()
    means = circuits.head_means(model, ioi.corruptions["abc"])
    kept, passes = circuits.prune_heads(model, ioi, means, threshold=-1.0)
    assert kept == circuits.all_heads(model) and passes == len(kept)
    kept, _ = circuits.prune_heads(model, ioi, means, threshold=float("inf"))
    assert kept == []


def test_head_pruning_tries_only_its_candidates(model):
    ioi = synthetic_ioi()
    means = circuits.head_means(model, ioi.corruptions["abc"])
    last_layer = [h for h in circuits.all_heads(model) if h.layer == model.cfg.n_layers - 1]
    kept, passes = circuits.prune_heads(model, ioi, means, threshold=float("inf"), candidates=last_layer)
    assert passes == len(last_layer) and kept == [h for h in circuits.all_heads(model) if h not in last_layer]


def test_ov_write_is_what_a_head_writes_when_it_attends_to_one_position(model):
    tokens = prompts(0)
    _, cache = model.run_with_cache(tokens, ["blocks.1.hook_attn_in", "blocks.1.attn.hook_v"])
    attn = model.blocks[1].attn
    v = cache["blocks.1.attn.hook_v"]
    v = v.repeat_interleave(model.cfg.n_heads // v.shape[2], dim=2)
    torch.testing.assert_close(attn.ov_write(cache["blocks.1.hook_attn_in"]), attn.head_results(v))
    ioi = synthetic_ioi()
    names = torch.unique(torch.cat([ioi.answers, ioi.foils]))
    table = circuits.copy_scores_in_context(model, ioi, [circuits.Head(1, 0), circuits.Head(0, 2)], names)
    assert list(table["head"]) == ["L1H0", "L0H2"] and table[["copying", "suppression"]].le(1).all().all()


@pytest.mark.parametrize(
    "cfg",
    [*ARCHITECTURES.values(), replace(ARCHITECTURES["llama-like"], sliding_window=3, n_ctx=16)],
    ids=[*ARCHITECTURES, "windowed"],
)
def test_residual_patching_from_each_position_equals_one_forward_per_patch(cfg):
    model = random_model(cfg)
    clean, corrupt = prompts(0), prompts(1)
    metric = patching.LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    naive = patching.patch_residual_naive(model, clean, corrupt, metric)
    for per_pass in (1, 3):
        fast = patching.patch_residual(model, clean, corrupt, metric, positions_per_pass=per_pass)
        torch.testing.assert_close(fast, naive, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(naive, naive[0, 0])  # patches differ: the test can fail


@pytest.mark.parametrize("cfg", list(ARCHITECTURES.values()), ids=list(ARCHITECTURES))
def test_sweeps_with_a_counterfactual_that_differs_late_match_one_forward_per_patch(cfg):
    """A counterfactual equal to the clean prompt up to position 5 (IOI's, equal up to S2) leaves
    the patches there as no-ops and the earlier positions' keys and values clean: the sweeps skip
    and reuse them, and must still equal one full forward per patch."""
    model = random_model(cfg)
    clean, corrupt = prompts(0), prompts(1)
    corrupt[:, :5] = clean[:, :5]
    z_names = [f"blocks.{i}.attn.hook_z" for i in range(cfg.n_layers)]
    r_names = [f"blocks.{i}.hook_resid_pre" for i in range(cfg.n_layers)]
    values = patching.interventions(model, clean, corrupt, z_names + r_names)["resample"]
    assert torch.equal(values[r_names[1]][:, :5], model.run_with_cache(clean, r_names)[1][r_names[1]][:, :5])
    metric = patching.LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    naive = patching.patch_residual_naive(model, clean, corrupt, metric)
    fast = patching.patch_residual(model, clean, corrupt, metric)
    torch.testing.assert_close(fast, naive, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(naive[:, 5:], naive[0, 0])  # late patches differ: the test can fail
    heads = patching.patch_heads(model, clean, corrupt, metric, chunk=5)
    naive_heads = patching.patch_heads_naive(model, clean, corrupt, metric)
    torch.testing.assert_close(heads, naive_heads, rtol=1e-5, atol=1e-6)


def test_every_circuit_score_takes_a_metric(model):
    """faithfulness, minimality, head-level ACDC and edge-level ACDC score with the metric given."""
    from resid.stats.metrics import AnswerProbability, LogitDiff

    ioi = synthetic_ioi()
    means = circuits.head_means(model, ioi.corruptions["abc"])
    everything = circuits.all_heads(model)
    logit_diff = LogitDiff(ioi.answers, ioi.foils)
    default = circuits.faithfulness(model, ioi, everything[:4], means)
    assert circuits.faithfulness(model, ioi, everything[:4], means, metric=logit_diff) == default
    probability = AnswerProbability(ioi.answers)
    full = model(ioi.tokens)[:, -1].float().softmax(-1).gather(-1, ioi.answers[:, None]).mean().item()
    scored = circuits.faithfulness(model, ioi, everything[:4], means, metric=probability)
    assert scored["full model"] == pytest.approx(full, rel=1e-5) and scored != default
    minimal = circuits.minimality(model, ioi, everything[:2], means, metric=probability)
    assert not minimal["drop"].equals(circuits.minimality(model, ioi, everything[:2], means)["drop"])

    def unmoved(logits):  # a distance that never grows: every head goes
        return torch.zeros(logits.shape[:-1])

    kept, passes = circuits.prune_heads(model, ioi, means, threshold=0.5, metric=unmoved)
    assert kept == [] and passes == len(everything)
    attn_only = random_model(ARCHITECTURES["attn-only"])
    kept, _ = patching.acdc(attn_only, prompts(0), prompts(1), threshold=1e-6, metric=unmoved)
    assert not kept.any()
    kept, _ = patching.acdc(attn_only, prompts(0), prompts(1), threshold=1e-6)  # KL does grow
    assert kept.any()


def test_signed_share_recovers_planted_heads_where_a_share_of_abs_means_is_biased():
    generator = torch.Generator().manual_seed(0)
    n_prompts, n_heads = 1000, 200
    effects = torch.zeros(n_heads)
    effects[:3], effects[3] = torch.tensor([2.0, 1.5, 1.0]), -1.5  # three writers and one suppressor

    def draw() -> torch.Tensor:  # [prompt, head]: the planted effects plus noise
        return effects + torch.randn(n_prompts, n_heads, generator=generator)

    chosen, signs = circuits.top_heads_signed(draw(), k=4)
    assert set(chosen.tolist()) == {0, 1, 2, 3} and signs[3] == -1
    measuring = draw()
    truth = 1.0  # only the planted heads carry any effect
    share = circuits.signed_share(measuring, chosen, signs)
    assert abs(share - truth) < 0.15, share
    # the share of |means| counts every noise head's |mean| (about 0.025 each here): well below 1
    mean = measuring.mean(0).abs()
    assert (mean[chosen].sum() / mean.sum()).item() < 0.7
    # a chosen head whose effect moves to another head on the measuring prompts lowers the share
    measuring[:, 0] -= effects[0]
    measuring[:, 10] += effects[0] * signs[10]
    assert circuits.signed_share(measuring, chosen, signs) < share - 0.2
