"""Causal interventions: activation patching, path patching, and circuits of edges.

Activation patching (the Primer, section 3.2.2) runs the model on a prompt and replaces one
component's activation by another value: zero, the mean over a counterfactual set, the
activation from one counterfactual prompt (resample), or from the prompt with noised input
embeddings. The sweeps here batch every patch of a layer into one forward pass that starts from
the cached residual stream at that layer, rather than running one full forward per patch.

Every sweep, here and in the edge view below, takes ``(model, clean, counterfactual, metric,
…)``: the clean prompts, the counterfactual prompts (``[batch, pos]`` tokens, paired with the
clean ones), and a metric of the last position's logits (``metrics.py``).

The edge view (section 3.2.3) treats the model as a graph: upstream nodes (the embedding,
every head, every MLP) write into the residual stream, downstream nodes (every head's input,
every MLP's input, the logits) read the sum of what was written before them. An edge can be
kept (the downstream node reads the upstream node's activation on this run) or corrupted
(it reads the upstream node's activation on the counterfactual prompt). Path patching is
corrupting chosen edges; edge attribution patching (EAP) is the gradient of the metric with
respect to every edge's keep-weight at once; ACDC prunes edges one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from resid.model import Transformer, hooks, key_value_prefix
from resid.model.basis import read, write
from resid.model.cache import Head, HeadLike, act_name
from resid.runtime import progress
from resid.stats.metrics import KLFromReference, LogitDiff, Metric

__all__ = ["KLFromReference", "LogitDiff", "Metric"]  # the metrics, where the patching tools are

# --- activation patching, batched ---


INTERVENTIONS = ("zero", "mean", "resample", "noise")


def interventions(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor,
    names: list[str],
    noise_scale: float = 3.0,
    seed: int = 0,
    kinds: tuple[str, ...] = INTERVENTIONS,
) -> dict[str, dict[str, Tensor]]:
    """The replacement value of each named activation under each intervention:
    ``{"zero" | "mean" | "resample" | "noise": {name: tensor shaped like the clean one}}``.

    mean: the average over the counterfactual prompts at each position; resample: the paired
    counterfactual prompt's activation; noise: the clean prompt with Gaussian noise of
    ``noise_scale`` times the embeddings' standard deviation added to every input embedding
    (the corruption of Meng et al.'s causal tracing). ``kinds`` computes only those. Zero and
    mean accept a counterfactual set of any size (the same positions); resample needs pairs.
    """
    unknown = [k for k in kinds if k not in INTERVENTIONS]
    if unknown:
        raise ValueError(f"no intervention {unknown[0]!r}; choose from {', '.join(INTERVENTIONS)}")
    # the mean may come from a set of another size; a resample pairs prompt with prompt
    paired = (
        clean.shape == counterfactual.shape
        if "resample" in kinds
        else clean.shape[1:] == counterfactual.shape[1:]
    )
    if not paired:
        shapes = f"clean {tuple(clean.shape)}, counterfactual {tuple(counterfactual.shape)}"
        raise ValueError(f"the counterfactual prompts must pair with the clean ones: {shapes}")
    values: dict[str, dict[str, Tensor]] = {}
    with torch.no_grad():
        if set(kinds) - {"noise"}:  # noise needs only the clean prompts
            _, counter = model.run_with_cache(counterfactual, names, logits_to_keep=1)
            shape = {n: (len(clean), *counter[n].shape[1:]) for n in names}  # the clean run's
        if "zero" in kinds:
            values["zero"] = {n: counter[n].new_zeros(shape[n]) for n in names}
        if "mean" in kinds:
            values["mean"] = {n: counter[n].mean(0, keepdim=True).expand(shape[n]) for n in names}
        if "resample" in kinds:
            values["resample"] = {n: counter[n] for n in names}
        if "noise" in kinds:
            embeddings = model.embed_tokens(clean)
            generator = torch.Generator().manual_seed(seed)
            noise = torch.randn(embeddings.shape, generator=generator).to(embeddings)
            noise = noise * embeddings.std() * noise_scale
            with model.hooks([("hook_embed", lambda x, hook: x + noise)]):
                values["noise"] = dict(model.run_with_cache(clean, names, logits_to_keep=1)[1])
    return values


def _replacement_values(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor | Mapping[str, Tensor],
    names: list[str],
    intervention: str,
    noise_scale: float,
    seed: int,
) -> Mapping[str, Tensor]:
    """What a sweep patches in: the ``intervention``'s values built from the counterfactual
    prompts, or, given activations (a cache), those as they are (as TransformerLens's patching
    functions take a cache)."""
    if isinstance(counterfactual, Tensor):
        built = interventions(model, clean, counterfactual, names, noise_scale, seed, (intervention,))
        return built[intervention]
    missing = [n for n in names if n not in counterfactual]
    if missing:
        raise ValueError(f"the activations to patch in have no {missing[0]!r}")
    return counterfactual


def _clean_run(model: Transformer, tokens: Tensor, names: list[str]) -> tuple[Tensor, dict, bool]:
    """The clean run's logits and the activations ``names``, plus every block's keys and values
    when the model is causal and pre-norm (then a patch can rerun only the positions it can
    change: the returned flag)."""
    cfg = model.cfg
    suffix = cfg.causal and not cfg.post_norm
    kv_names = [act_name(h, i) for i in range(cfg.n_layers) for h in ("rot_k", "v")]
    logits, cache = model.run_with_cache(tokens, names + (kv_names if suffix else []))
    return logits, cache, suffix


def _unchanged(replacement: Tensor, clean: Tensor) -> Tensor:
    """Per position, whether the replacement is exactly the clean value in every prompt: ``[pos]``.
    A patch there changes nothing (a counterfactual prompt that differs from the clean one only
    from some token on leaves every activation before it as it was)."""
    return (replacement == clean).flatten(2).all(-1).all(0)


@torch.no_grad()
def patch_residual(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor | Mapping[str, Tensor],
    metric: Metric,
    intervention: str = "resample",
    *,
    noise_scale: float = 3.0,
    seed: int = 0,
    chunk: int = 512,
    positions_per_pass: int = 2,
    per_prompt: bool = False,
) -> Tensor:
    """Patch the residual stream at one layer and one position at a time: ``[layer, position]``
    (``[layer, position, k]`` for a metric that returns k values), averaged over prompts, or
    ``[layer, position, prompt(, k)]`` with ``per_prompt`` (for intervals over prompts).

    The values patched in are the ``intervention``'s (``interventions``: zero, mean, resample or
    noise) built from the ``counterfactual`` prompts, or, given a cache of activations, its
    ``blocks.{l}.hook_resid_pre`` (``[batch, pos, d_model]``). Patches run batched from their
    layer on. A patch whose replacement is the clean value in every prompt changes nothing and
    is not run: its cell is the clean metric. In a causal model a patch at position p cannot
    change the positions before it, so those keep the clean run's keys and values and only the
    positions from p on are recomputed (``positions_per_pass`` neighbouring positions share one
    batch, which starts at the first of them).
    """
    cfg = model.cfg
    names = [act_name("resid_pre", i) for i in range(cfg.n_layers)]
    replacements = _replacement_values(model, clean, counterfactual, names, intervention, noise_scale, seed)
    logits, cache, suffix = _clean_run(model, clean, names)
    batch, n_pos = clean.shape
    reduce = (lambda x: x) if per_prompt else (lambda x: x.mean(1))
    unpatched = reduce(metric(logits[:, -1]).unsqueeze(0))[0]  # the clean metric, for no-op patches
    result = []
    for layer, name in enumerate(progress.steps(names, "residual patching, by layer")):
        cells = [unpatched] * n_pos
        changed = (~_unchanged(replacements[name], cache[name])).nonzero()[:, 0]
        if not suffix and len(changed):
            x = cache[name].unsqueeze(0).repeat(len(changed), 1, 1, 1)  # [patched position, batch, pos, d]
            x[torch.arange(len(changed)), :, changed] = replacements[name][:, changed].transpose(0, 1)
            values = _batched(lambda xs, layer=layer: model.finish_from(xs, layer), x.flatten(0, 1), chunk)
            for position, cell in zip(
                changed.tolist(), reduce(metric(values.view(len(changed), batch, -1))), strict=True
            ):
                cells[position] = cell
        for at in range(0, len(changed) if suffix else 0, positions_per_pass):
            group = changed[at : at + positions_per_pass]
            first = int(group[0])
            # [patch, batch, pos from first, d_model]
            x = cache[name][:, first:].unsqueeze(0).repeat(len(group), 1, 1, 1)
            x[torch.arange(len(group)), :, group - first] = replacements[name][:, group].transpose(0, 1)
            prefix = key_value_prefix(
                cache, range(layer, cfg.n_layers), first, torch.arange(batch).repeat(len(group))
            )
            values = model.finish_from(x.flatten(0, 1), layer, first, prefix)
            for position, cell in zip(
                group.tolist(), reduce(metric(values.view(len(group), batch, -1))), strict=True
            ):
                cells[position] = cell
        result.append(torch.stack(cells))
    return torch.stack(result).float().cpu()


@torch.no_grad()
def patch_heads(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor | Mapping[str, Tensor],
    metric: Metric,
    intervention: str = "resample",
    *,
    noise_scale: float = 3.0,
    seed: int = 0,
    chunk: int = 512,
    per_prompt: bool = False,
) -> Tensor:
    """Patch one head's output (its ``hook_z``, at every position) at a time: ``[layer, head]``,
    the metric averaged over prompts, or ``[layer, head, prompt]`` with ``per_prompt``; every
    head of a layer in one batched pass from that layer. The values patched in are as in
    ``patch_residual``, at ``blocks.{l}.attn.hook_z``.

    Where a layer's replacements are the clean values at the first positions of every prompt
    (a counterfactual that differs from the clean prompt only from some token on), a causal
    model keeps the clean run's keys and values there and reruns only the later positions."""
    cfg = model.cfg
    resid_names = [act_name("resid_pre", i) for i in range(cfg.n_layers)]
    z_names = [act_name("z", i) for i in range(cfg.n_layers)]
    replacements = _replacement_values(model, clean, counterfactual, z_names, intervention, noise_scale, seed)
    logits, cache, suffix = _clean_run(model, clean, resid_names + z_names)
    unpatched = metric(logits[:, -1])  # [batch(, k)]
    batch, n_pos = clean.shape
    result = []
    for layer in progress.steps(range(cfg.n_layers), "head patching, by layer"):
        source = replacements[z_names[layer]]  # [batch, pos, head, d_head]
        same = _unchanged(source, cache[z_names[layer]])
        start = int(same.int().cumprod(0).sum()) if suffix else 0  # leading positions no patch changes
        if start == n_pos:
            per_head = unpatched.unsqueeze(0).repeat(cfg.n_heads, *[1] * unpatched.dim())
            result.append(per_head if per_prompt else per_head.mean(1))
            continue

        def run(
            xs: Tensor, first: int, layer: int = layer, source: Tensor = source, start: int = start
        ) -> Tensor:
            rows = torch.arange(len(xs))
            head, prompt = (first + rows) // batch, (first + rows) % batch  # row r patches head r // batch

            def patch(z: Tensor, hook) -> Tensor:
                z = z.clone()
                z[rows, :, head] = source[prompt, start:, head]
                return z

            prefix = key_value_prefix(cache, range(layer, cfg.n_layers), start, prompt)
            with model.hooks([(z_names[layer], patch)]):
                return model.finish_from(xs, layer, start, prefix)

        # [head * batch, pos from start, d_model]: row r patches head r // batch of prompt r % batch
        x = cache[resid_names[layer]][:, start:].repeat(cfg.n_heads, 1, 1)
        values = _batched(run, x, chunk, pass_offset=True)
        per_head = metric(values.view(cfg.n_heads, batch, -1))
        result.append(per_head if per_prompt else per_head.mean(1))
    return torch.stack(result).float().cpu()


def _batched(run: Callable, x: Tensor, chunk: int, pass_offset: bool = False) -> Tensor:
    outputs = []
    for start in range(0, len(x), chunk):
        part = x[start : start + chunk]
        outputs.append(run(part, start) if pass_offset else run(part))
    return torch.cat(outputs)


@torch.no_grad()
def patch_heads_naive(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor | Mapping[str, Tensor],
    metric: Metric,
    intervention: str = "resample",
    *,
    noise_scale: float = 3.0,
    seed: int = 0,
) -> Tensor:
    """The same sweep as ``patch_heads``, one full forward pass per head: the reference the
    benchmark measures the batched version against."""
    cfg = model.cfg
    names = [act_name("z", i) for i in range(cfg.n_layers)]
    replacements = _replacement_values(model, clean, counterfactual, names, intervention, noise_scale, seed)
    result = torch.zeros(cfg.n_layers, cfg.n_heads)
    for layer in range(cfg.n_layers):
        source = {layer: replacements[act_name("z", layer)]}
        for head in range(cfg.n_heads):
            ablation = hooks.replace_heads([(layer, head)], source)
            logits = model.run_with_hooks(clean, ablation, logits_to_keep=1)[:, -1]
            result[layer, head] = metric(logits).mean()
    return result


@torch.no_grad()
def patch_residual_naive(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor | Mapping[str, Tensor],
    metric: Metric,
    intervention: str = "resample",
    *,
    noise_scale: float = 3.0,
    seed: int = 0,
) -> Tensor:
    """The same sweep as ``patch_residual``, one full forward pass per layer and position: the
    reference the benchmark and the tests hold the batched version to."""
    names = [act_name("resid_pre", i) for i in range(model.cfg.n_layers)]
    replacements = _replacement_values(model, clean, counterfactual, names, intervention, noise_scale, seed)
    result = torch.zeros(model.cfg.n_layers, clean.shape[1])
    for layer, name in enumerate(names):
        for position in range(clean.shape[1]):

            def patch(x: Tensor, hook, name: str = name, position: int = position) -> Tensor:
                x = x.clone()
                x[:, position] = replacements[name][:, position]
                return x

            patched = model.run_with_hooks(clean, [(name, patch)], logits_to_keep=1)[:, -1]
            result[layer, position] = metric(patched).mean()
    return result


# --- the graph of edges ---


@dataclass(frozen=True)
class Graph:
    """Nodes of a pre-norm model. ``upstream[u]`` writes, ``downstream[v]`` reads; ``allowed[u, v]``
    is True where u comes before v in the forward pass (an edge exists)."""

    upstream: list[str]
    downstream: list[str]
    allowed: Tensor

    @classmethod
    def of(cls, model: Transformer, split_qkv: bool = False) -> Graph:
        """``split_qkv`` gives every head three downstream nodes, ``L{l}H{h}.q``, ``.k`` and
        ``.v`` (its query, key and value inputs), so that an edge can end in a head's query alone."""
        cfg = model.cfg
        if cfg.post_norm or cfg.sandwich_norms:
            raise ValueError(
                "edges are defined for pre-norm models without sublayer output norms, whose residual "
                "is a sum of head and MLP writes"
            )
        upstream, downstream, order_up, order_down = ["embed"], [], [0], []
        for layer in range(cfg.n_layers):
            heads = [str(Head(layer, h)) for h in range(cfg.n_heads)]
            reads = [f"{head}.{part}" for part in "qkv" for head in heads] if split_qkv else heads
            downstream += reads
            order_down += [2 * layer + 1] * len(reads)
            upstream += heads
            order_up += [2 * layer + 1] * cfg.n_heads
            if not cfg.attn_only:  # a parallel block's MLP reads what its heads read, not their writes
                downstream.append(f"L{layer} MLP")
                order_down.append(2 * layer + (1 if cfg.parallel else 2))
                upstream.append(f"L{layer} MLP")
                order_up.append(2 * layer + 2)
        downstream.append("logits")
        order_down.append(2 * cfg.n_layers + 1)
        allowed = torch.tensor(order_up)[:, None] < torch.tensor(order_down)[None, :]
        return cls(upstream, downstream, allowed)

    def edges(self) -> list[tuple[str, str]]:
        return [(self.upstream[u], self.downstream[v]) for u, v in self.allowed.nonzero().tolist()]


def graph_forward(
    model: Transformer,
    tokens: Tensor,
    keep: Tensor | None = None,
    corrupted: Tensor | None = None,
    record_inputs: bool = False,
    split_qkv: bool = False,
) -> tuple[Tensor, Tensor, list[Tensor]]:
    """Run ``tokens`` through the model as a graph of edges (``Graph.of(model, split_qkv)``).

    ``keep`` is ``[upstream, downstream]``: 1 (or None: all) reads the upstream node's
    activation on this run, 0 its activation in ``corrupted`` (``[upstream, batch, pos,
    d_model]``, from ``corrupted_outputs`` on the counterfactual prompts), values between mix
    the two linearly. Each node reads the running residual minus the corrections of its
    corrupted edges, so a layer none of whose edges is corrupted runs as usual.

    Returns last-position logits, every upstream node's output on this run, and, with
    ``record_inputs``, what each downstream node read (gradients can be taken there).
    """
    cfg = model.cfg
    rope, _ = model.context(tokens.shape[1])
    resid = model.embed_tokens(tokens)
    outputs, inputs, down = [resid], [], 0
    weight = None if keep is None else 1 - keep.to(resid)  # how much of each edge is corrupted

    def read_inputs(n: int) -> Tensor:
        """What the next ``n`` downstream nodes read: ``[batch, pos, n, d_model]``, or the
        shared ``[batch, pos, d_model]`` when none of them has a corrupted edge."""
        shared = resid
        if weight is not None:
            w = weight[: len(outputs), down : down + n]
            rows = w.abs().sum(1).nonzero()[:, 0]
            if len(rows):
                diff = torch.stack([outputs[u] for u in rows.tolist()]) - corrupted[rows]
                return resid.unsqueeze(2) - torch.einsum("ubtd,uv->btvd", diff, w[rows])
        if record_inputs:
            recorded = shared.unsqueeze(2).repeat(1, 1, n, 1)
            if not recorded.requires_grad:  # the first layer's, when the embedding is given
                recorded.requires_grad_()
            inputs.append(recorded)
            return recorded
        return shared

    n_reads = 3 * cfg.n_heads if split_qkv else cfg.n_heads
    for block in model.blocks:
        x = read_inputs(n_reads)
        if split_qkv and x.dim() == 4:  # [batch, pos, 3 * head, d_model]: queries, keys, values
            q, k, v = x.split(cfg.n_heads, dim=2)
            heads = block.attention_by_head(q, rope, key_input=k, value_input=v)
        else:
            heads = block.attention_by_head(x, rope)  # [batch, pos, head, d_model]
        down += n_reads
        if block.parallel:
            x = read_inputs(1)  # the MLP's input, before this layer's heads write
        outputs += list(heads.unbind(2))
        resid = resid + heads.sum(2)
        if block.attn.W_O.bias is not None:
            resid = resid + write(block.attn.W_O.bias, block.R_attn_out)
        if block.mlp is not None:
            x = x if block.parallel else read_inputs(1)
            x = x[:, :, 0] if x.dim() == 4 else x
            out = write(block.mlp(read(block.ln2(x), block.R_mlp_in)), block.R_mlp_out)
            outputs.append(out)
            resid = resid + out
            down += 1
    final = read_inputs(1)
    final = final[:, :, 0] if final.dim() == 4 else final
    return model.to_logits(final[:, -1]), torch.stack(outputs), inputs


@torch.no_grad()
def corrupted_outputs(model: Transformer, counterfactual: Tensor) -> Tensor:
    """Every upstream node's output on the counterfactual prompts (the values a corrupted edge carries)."""
    return graph_forward(model, counterfactual)[1]


def edge_attribution_patching(
    model: Transformer, clean: Tensor, counterfactual: Tensor, metric: Metric, ig_steps: int = 0
) -> Tensor:
    """EAP (Nanda 2023; Syed et al. 2023): the first-order estimate of how much the metric
    changes when each edge is corrupted, for every edge from two forward passes and one
    backward: ``[upstream, downstream]`` (zero where no edge).

    ``ig_steps > 0`` is EAP-IG (Hanna et al. 2024): the gradient is averaged over ``ig_steps``
    points on the straight line from the counterfactual's input embeddings to the clean
    prompt's, as integrated gradients does, which follows the metric where a single gradient
    at the clean run would miss that it saturates."""
    graph = Graph.of(model)
    corrupted = corrupted_outputs(model, counterfactual)
    with torch.no_grad():
        _, outputs, _ = graph_forward(model, clean)
        clean_embed, counter_embed = model.embed_tokens(clean), model.embed_tokens(counterfactual)
    alphas = [1.0] if ig_steps == 0 else [(k + 0.5) / ig_steps for k in range(ig_steps)]  # midpoints
    grads = None
    for alpha in progress.steps(alphas, "EAP-IG, by step", show=ig_steps > 4):
        mixed = counter_embed + alpha * (clean_embed - counter_embed)
        on_the_line = [("hook_embed", lambda x, hook, mixed=mixed: mixed)] if ig_steps else []
        with torch.enable_grad(), model.hooks(on_the_line):
            logits, _, inputs = graph_forward(model, clean, record_inputs=True)
            step = torch.autograd.grad(metric(logits).mean(), inputs)
        step = torch.cat([g.movedim(2, 0) for g in step])  # [downstream, batch, pos, d_model], in order
        grads = step / len(alphas) if grads is None else grads + step / len(alphas)
    # corrupting edge (u, v) moves v's input by corrupted_u - clean_u; first order in that step
    scores = torch.einsum("ubtd,vbtd->uv", (corrupted - outputs).float(), grads.float())
    return (scores * graph.allowed.to(scores.device)).cpu()


@torch.no_grad()
def edge_patching(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor,
    metric: Metric,
    edges: list[tuple[int, int]],
    per_prompt: bool = False,
) -> Tensor:
    """Exact path patching of single edges: the metric's change when only edge (u, v) is
    corrupted, one forward pass per edge (``[edge]``, or ``[edge, prompt]`` with
    ``per_prompt``)."""
    graph = Graph.of(model)
    corrupted = corrupted_outputs(model, counterfactual)
    keep = graph.allowed.float()
    reduce = (lambda x: x) if per_prompt else (lambda x: x.mean())
    base = reduce(metric(graph_forward(model, clean, keep, corrupted)[0]))
    changes = []
    for u, v in progress.steps(edges, "exact edge patching"):
        keep[u, v] = 0.0
        changes.append(reduce(metric(graph_forward(model, clean, keep, corrupted)[0])) - base)
        keep[u, v] = 1.0
    return torch.stack(changes).cpu()


def _node(node: HeadLike | str) -> str:
    """A graph node's name: a head in any spelling as ``"L9H6"``, a name as it is."""
    return node if isinstance(node, str) else str(Head.of(node))


@torch.no_grad()
def path_patching(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor,
    metric: Metric,
    senders: list[HeadLike | str],
    receivers: list[HeadLike | str],
    per_prompt: bool = False,
) -> Tensor:
    """Each sender's effect through the receivers only (Wang et al. 2023): the metric's change
    when the edges from that sender into the receiver nodes carry the sender's value on the
    ``counterfactual`` prompts and every other edge, the sender's other paths included, stays
    clean. A head is given in any spelling (``Head(9, 6)``, ``(9, 6)``, ``"L9H6"``); other nodes
    are named as in ``Graph`` (``"embed"``, ``"L3 MLP"``), and a receiver such as ``"L9H6.q"`` is
    that head's query input alone. ``[sender]``, averaged over prompts, or ``[sender, prompt]``
    with ``per_prompt`` (for intervals)."""
    senders, receivers = [_node(s) for s in senders], [_node(r) for r in receivers]
    split = any(r.endswith((".q", ".k", ".v")) for r in receivers)
    graph = Graph.of(model, split_qkv=split)
    unknown = [r for r in receivers if r not in graph.downstream] + [
        s for s in senders if s not in graph.upstream
    ]
    if unknown:
        raise ValueError(f"no node {unknown[0]!r}; nodes are named like {graph.upstream[1]!r}")
    corrupted = corrupted_outputs(model, counterfactual)
    columns = [graph.downstream.index(r) for r in receivers]
    reduce = (lambda x: x) if per_prompt else (lambda x: x.mean())
    base = reduce(metric(graph_forward(model, clean, split_qkv=split)[0]))
    changes = []
    for sender in progress.steps(senders, "path patching, by sender"):
        keep = torch.ones(graph.allowed.shape)
        keep[graph.upstream.index(sender), columns] = 0.0
        changes.append(
            reduce(metric(graph_forward(model, clean, keep, corrupted, split_qkv=split)[0])) - base
        )
    return torch.stack(changes)


@torch.no_grad()
def circuit_metric(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor,
    metric: Metric,
    kept: Tensor,
    per_prompt: bool = False,
) -> float | Tensor:
    """The metric when only the ``kept`` edges (bool ``[upstream, downstream]``) read the clean
    run and every other edge carries its value on the ``counterfactual`` prompts: its mean over
    prompts, or ``[prompt]`` with ``per_prompt``. A stack of circuits ``[circuit, upstream,
    downstream]`` gives ``[circuit]`` (or ``[circuit, prompt]``), sharing one counterfactual
    pass."""
    corrupted = corrupted_outputs(model, counterfactual)
    circuits = kept.reshape(-1, *kept.shape[-2:]).float()
    values = torch.stack([metric(graph_forward(model, clean, c, corrupted)[0]) for c in circuits])
    values = values.reshape(*kept.shape[:-2], -1)  # [(circuit,) prompt]
    values = (values if per_prompt else values.mean(-1)).cpu()
    return values.item() if values.dim() == 0 else values


@torch.no_grad()
def acdc(
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor,
    threshold: float,
    candidates: Tensor | None = None,
    metric: Metric | None = None,
) -> tuple[Tensor, int]:
    """ACDC-style pruning (Conmy et al. 2023): visit downstream nodes from the logits back and,
    for each incoming edge, corrupt it for good if that raises KL(full model || circuit) by less
    than ``threshold``. ``candidates`` (bool ``[upstream, downstream]``, e.g. the edges EAP
    ranks highest) restricts the search: every other edge starts corrupted, which is what makes
    ACDC affordable on a model with tens of thousands of edges. ``metric`` replaces KL: any
    per-prompt distance of the circuit's logits from the full model's (Conmy et al. also prune
    on the change in a task metric). Returns the kept edges and the forward passes run."""
    graph = Graph.of(model)
    corrupted = corrupted_outputs(model, counterfactual)
    reference = graph_forward(model, clean)[0]
    kept = graph.allowed.clone() if candidates is None else graph.allowed & candidates.to(torch.bool)
    kl = metric or KLFromReference(reference)
    current, passes = kl(graph_forward(model, clean, kept.float(), corrupted)[0]).mean().item(), 0
    for v in progress.steps(reversed(range(len(graph.downstream))), "ACDC, by downstream node"):
        for u in reversed(kept[:, v].nonzero()[:, 0].tolist()):
            kept[u, v] = False
            trial = kl(graph_forward(model, clean, kept.float(), corrupted)[0]).mean().item()
            passes += 1
            if trial - current < threshold:
                current = trial
            else:
                kept[u, v] = True
    return kept, passes
