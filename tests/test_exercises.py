"""Every exercise's check passes on a solution and fails on a plausible wrong answer, on tiny
models; a prediction is required before a check says anything about the answer."""

import copy
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch

from resid import book, stats
from resid.book import exercises
from resid.model import Config, Transformer, rotate_residual
from resid.stats.metrics import LogitDiff
from resid.tools import plans, tda
from resid.tools.behaviours import ContrastSet
from resid.tools.circuits import Head, all_heads, head_means


def tiny(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = Config(**{"d_model": 32, "n_layers": 4, "n_heads": 4, "d_mlp": 64, "n_ctx": 16, **overrides})
    model = Transformer(cfg).eval()
    with torch.no_grad():  # gains away from 1, as training leaves them
        for name, p in model.named_parameters():
            if name.endswith(("ln1.weight", "ln2.weight", "ln_final.weight")):
                p.mul_(1 + 0.3 * torch.rand(p.shape))
    return model


@pytest.fixture(scope="module")
def model() -> Transformer:
    return tiny()


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    return torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(1))


@pytest.fixture(autouse=True)
def fresh_predictions():
    exercises.forget_predictions()
    yield
    exercises.forget_predictions()


def passes(id, *answer, prediction=None, **context) -> bool:
    if exercises.EXERCISES[id].predicts:
        exercises.predict(id, "my guess" if prediction is None else prediction)
    return exercises.check(id, *answer, **context)


def kurtosis_right(acts):
    centred = acts.double() - acts.double().mean(-1, keepdim=True)
    return (centred.pow(4).mean(-1) / centred.pow(2).mean(-1).pow(2)).mean().item()


def kurtosis_uncentred(acts):
    x = acts.double()
    return (x.pow(4).mean(-1) / x.pow(2).mean(-1).pow(2)).mean().item()


def test_1_1():
    assert passes("1.1", kurtosis_right)
    assert not passes("1.1", kurtosis_uncentred)


def test_1_2():
    def haar(d, generator):
        q, r = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=generator))
        return q * torch.sign(torch.diagonal(r))

    def qr_only(d, generator):
        return torch.linalg.qr(torch.randn(d, d, dtype=torch.float64, generator=generator))[0]

    assert passes("1.2", haar)
    assert not passes("1.2", qr_only)
    assert not passes("1.2", lambda d, g: torch.randn(d, d, generator=g))


def test_1_3():
    acts = torch.randn(200, 32, generator=torch.Generator().manual_seed(0))
    acts[:, 3] += 20
    vectors = torch.randn(1000, 576, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    vectors[:, 0] = 100.0
    measured = stats.kurtosis_metric(vectors)

    def without(x, dim):
        zeroed = x.clone()
        zeroed[:, dim] = 0
        return stats.kurtosis_metric(zeroed)

    def without_in_place(x, dim):
        x[:, dim] = 0
        return stats.kurtosis_metric(x)

    assert passes("1.3", measured, without, acts=acts)
    assert not passes("1.3", 3.0, without, acts=acts)  # forgot to set the coordinate
    assert not passes("1.3", measured, without_in_place, acts=acts)


def test_2_1():
    gaussian = torch.randn(2048, 128, generator=torch.Generator().manual_seed(5))
    measured = {}
    for k in (1, 4, 16, 32, 64):
        scaled = gaussian.clone()
        scaled[:, :k] *= 8.0
        measured[k] = stats.kurtosis_metric(scaled)

    def formula(k, d, s):
        return 3 * d * (k * s**4 + d - k) / (k * s**2 + d - k) ** 2

    assert passes("2.1", formula, measured)
    assert not passes("2.1", lambda k, d, s: 3 * (k * s**4 + d - k) / (k * s**2 + d - k) ** 2, measured)
    formula_values = {k: formula(k, 128, 8.0) for k in measured}
    assert not passes("2.1", formula, formula_values)  # the formula's values, not measurements


def test_2_2():
    def first_crossing(blocks, threshold):
        peaks = blocks.groupby(["run", "step"])["kurtosis"].max().reset_index()
        crossing = {}
        for run, g in peaks.groupby("run"):
            above = g["kurtosis"] > threshold
            crossing[run] = g.loc[above, "step"].min() if above.any() else None
        return crossing

    def last_crossing(blocks, threshold):
        above = blocks[blocks["kurtosis"] > threshold]
        return {run: above.loc[above.run == run, "step"].max() if (above.run == run).any() else None
                for run in blocks.run.unique()}  # fmt: skip

    assert passes("2.2", first_crossing)
    assert not passes("2.2", last_crossing)


def test_2_3(model, tokens):
    def boundary_kurtosis(m, t):
        stream = m.residual_stream(t)
        rows = [{"layer": i, "kurtosis": stats.kurtosis_metric(a), "rotated": stats.rotated_kurtosis(a, 2)[0]}
                for i, a in enumerate(stream)]  # fmt: skip
        return pd.DataFrame(rows)

    def no_rotation(m, t):
        table = boundary_kurtosis(m, t)
        return table.assign(rotated=table["kurtosis"] * 3)

    assert passes("2.3", boundary_kurtosis, model=model, tokens=tokens, prediction="rotated")
    assert not passes("2.3", no_rotation, model=model, tokens=tokens)
    assert not passes("2.3", lambda m, t: boundary_kurtosis(m, t).iloc[1:], model=model, tokens=tokens)


def test_3_1():
    def gap(norm, x, rotation):
        with torch.no_grad():
            return (norm(x @ rotation) - norm(x) @ rotation).abs().max().item()

    def gap_unrotated_output(norm, x, rotation):
        with torch.no_grad():
            return (norm(x @ rotation) - norm(x)).abs().max().item()

    assert passes("3.1", gap)
    assert not passes("3.1", gap_unrotated_output)


def test_3_2(tokens):
    model = tiny(norm="rmsnorm")

    def fold(m):
        folded = copy.deepcopy(m)
        with torch.no_grad():
            folded.blocks[0].mlp.W_in.weight.mul_(folded.blocks[0].ln2.weight)
            folded.blocks[0].ln2.weight.fill_(1.0)
        return folded

    def fold_rows(m):  # scales W's rows instead of its columns
        folded = copy.deepcopy(m)
        with torch.no_grad():
            folded.blocks[0].mlp.W_in.weight.mul_(folded.blocks[0].ln2.weight.mean())
            folded.blocks[0].ln2.weight.fill_(1.0)
        return folded

    def fold_in_place(m):
        with torch.no_grad():
            m.blocks[0].mlp.W_in.weight.mul_(m.blocks[0].ln2.weight)
            m.blocks[0].ln2.weight.fill_(1.0)
        return m

    assert passes("3.2", fold, model=model, tokens=tokens, prediction="yes")
    assert not passes("3.2", fold_rows, model=model, tokens=tokens)
    assert not passes("3.2", fold_in_place, model=model, tokens=tokens)


def test_3_3():
    models = {kind: tiny(norm=kind) for kind in ("basisfree", "rmsnorm", "layernorm")}

    def per_channel(m):
        return [n for n, p in m.named_parameters() if p.shape == (m.cfg.d_model,)]

    def norms_only(m):
        return [n for n, _ in m.named_parameters() if "ln" in n]

    assert passes("3.3", per_channel, models=models, prediction={"basisfree": 0, "rmsnorm": 9})
    assert not passes("3.3", norms_only, models=models)


def test_3_4():
    treated, control = [1.10, 1.21, 1.05, 1.18, 1.12], [1.08, 1.17, 1.04, 1.15, 1.09]

    def paired(a, b):
        return stats.t_interval(torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64))

    def unpaired(a, b):
        return stats.welch_interval(a, b)

    assert passes("3.4", paired, treated=treated, control=control, prediction=3.0)
    assert not passes("3.4", unpaired, treated=treated, control=control)


def test_4_1(tokens):
    model = tiny(norm="basisfree")

    def forget(m, rotation):
        rotated = rotate_residual(m, rotation)
        with torch.no_grad():
            rotated.blocks[0].mlp.W_out.weight.copy_(m.blocks[0].mlp.W_out.weight)
        return rotated

    assert passes("4.1", forget, model=model, tokens=tokens, prediction="a lot")
    assert not passes("4.1", rotate_residual, model=model, tokens=tokens)  # forgot nothing


def test_4_2():
    def givens(d, i, j, angle):
        g = torch.eye(d, dtype=torch.float64)
        g[i, i] = g[j, j] = math.cos(angle)
        g[i, j], g[j, i] = math.sin(angle), -math.sin(angle)
        return g

    def not_a_rotation(d, i, j, angle):
        g = givens(d, i, j, angle)
        g[j, i] = math.sin(angle)
        return g

    assert passes("4.2", givens)
    assert not passes("4.2", not_a_rotation)


def centre_writes(model, over: int = 0):
    centred = copy.deepcopy(model)
    with torch.no_grad():
        for embedding in (centred.embed, centred.pos_embed):
            embedding.weight -= embedding.weight.mean(-1, keepdim=True)
        for block in centred.blocks:
            for writer in (block.attn.W_O, block.mlp.W_out):  # [d_model, in]: centre each column
                writer.weight -= writer.weight.mean(over, keepdim=True)
    return centred


def test_4_4():
    assert passes("4.4", centre_writes, prediction="float noise")
    assert not passes("4.4", lambda m: centre_writes(m, over=1))  # each row centred, not each column
    assert not passes("4.4", copy.deepcopy)  # nothing centred


def test_4_3(tokens):
    model = tiny(norm="basisfree", rotation="shared")
    names = [f"blocks.{i}.hook_resid_mid" for i in range(4)]

    def rotated_residual(m, t):
        _, cache = m.run_with_cache(t, names)
        return [stats.kurtosis_metric(cache[n] @ b.R_mlp_in) for n, b in zip(names, m.blocks, strict=True)]

    def unrotated(m, t):
        _, cache = m.run_with_cache(t, names)
        return [stats.kurtosis_metric(cache[n]) for n in names]

    assert passes("4.3", rotated_residual, model=model, tokens=tokens, prediction="residual @ R_mlp_in")
    assert not passes("4.3", unrotated, model=model, tokens=tokens)


def three_steps(make, w, g):
    p = torch.nn.Parameter(w.clone())
    optimiser = make([p])
    for _ in range(3):
        p.grad = g.clone()
        optimiser.step()
    return p.detach()


def test_5_1():
    def gap(make, w, g, p, q):
        plain, rotated = three_steps(make, w, g), three_steps(make, p.T @ w @ q, p.T @ g @ q)
        return ((p.T @ plain @ q - rotated).abs().max() / (plain - w).abs().max()).item()

    def gap_unrotated(make, w, g, p, q):  # compares with the unrotated result
        plain, rotated = three_steps(make, w, g), three_steps(make, p.T @ w @ q, p.T @ g @ q)
        return ((plain - rotated).abs().max() / (plain - w).abs().max()).item()

    assert passes("5.1", gap, prediction={"SGD", "Muon"})
    assert not passes("5.1", gap_unrotated)


def test_5_2():
    assert passes("5.2", lambda g, lr: -lr * g.sign(), prediction=0.8)
    assert not passes("5.2", lambda g, lr: -lr * g)  # plain gradient descent
    assert not passes("5.2", lambda g, lr: -lr * g / g.norm())


def test_5_3():
    def share(acts):
        energy = acts.double().pow(2).sum(0)
        return (energy.topk(4).values.sum() / energy.sum()).item()

    def share_of_magnitudes(acts):
        energy = acts.double().abs().sum(0)
        return (energy.topk(4).values.sum() / energy.sum()).item()

    assert passes("5.3", share)
    assert not passes("5.3", share_of_magnitudes)


def test_6_1(model, tokens):
    from resid.tools import attribution

    def grad_x_input(m, t, target, foil):
        score = attribution.prediction_score(m, t, target, foil)
        embeddings = m.embed_tokens(t).detach().requires_grad_()
        (gradient,) = torch.autograd.grad(score(embeddings).sum(), embeddings)
        return (gradient * embeddings).sum(-1)[0]

    def gradient_only(m, t, target, foil):
        score = attribution.prediction_score(m, t, target, foil)
        embeddings = m.embed_tokens(t).detach().requires_grad_()
        (gradient,) = torch.autograd.grad(score(embeddings).sum(), embeddings)
        return gradient.sum(-1)[0]

    context = {"model": model, "tokens": tokens[0], "target": 5, "foil": 9}
    assert passes("6.1", grad_x_input, **context)
    assert not passes("6.1", gradient_only, **context)


def test_6_4(model, tokens):
    from resid.tools import attribution

    def head_dla(m, t, answers, foils, layer, head):
        final = m.resid_names()[-1]
        _, cache = m.run_with_cache(t, [f"blocks.{layer}.attn.hook_z", final])
        d = m.cfg.head_dim
        w_o = m.blocks[layer].attn.W_O.weight[:, head * d : (head + 1) * d]
        write = cache[f"blocks.{layer}.attn.hook_z"][:, -1, head] @ w_o.T
        normed = attribution.frozen_final_norm(m, cache[final][:, -1])(write)
        direction = m.unembed.weight[answers] - m.unembed.weight[foils]
        return (normed * direction).sum(-1).mean().item()

    def without_norm(m, t, answers, foils, layer, head):
        _, cache = m.run_with_cache(t, [f"blocks.{layer}.attn.hook_z"])
        d = m.cfg.head_dim
        w_o = m.blocks[layer].attn.W_O.weight[:, head * d : (head + 1) * d]
        write = cache[f"blocks.{layer}.attn.hook_z"][:, -1, head] @ w_o.T
        return (write * (m.unembed.weight[answers] - m.unembed.weight[foils])).sum(-1).mean().item()

    context = {"model": model, "tokens": tokens, "answers": torch.tensor([1, 2, 3]),
               "foils": torch.tensor([4, 5, 6]), "layer": 2, "head": 1}  # fmt: skip
    with torch.no_grad():
        assert passes("6.4", head_dla, prediction="no", **context)
        assert not passes("6.4", without_norm, **context)


def test_6_5(model, tokens):
    def lens(m, t):
        stream = m.residual_stream(t).view(-1, *t.shape, m.cfg.d_model)[:, :, -1]
        return m.unembed(m.ln_final(stream))

    def lens_without_norm(m, t):
        stream = m.residual_stream(t).view(-1, *t.shape, m.cfg.d_model)[:, :, -1]
        return m.unembed(stream)

    assert passes("6.5", lens, model=model, tokens=tokens)
    assert not passes("6.5", lens_without_norm, model=model, tokens=tokens)


def test_7_1():
    recovered_row = torch.tensor([1.0, 1.0, 0.25, 1.0])
    assert passes("7.1", 0.75, recovered_row=recovered_row, prediction=1.0)
    assert not passes("7.1", 1.0, recovered_row=recovered_row)


def test_7_2(model, tokens):
    metric = LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    counterfactual = torch.randint(0, 256, tokens.shape, generator=torch.Generator().manual_seed(2))
    layer, head, name = 1, 2, "blocks.1.attn.hook_z"

    def resample(m, clean, cf, metric, layer, head):
        _, cache = m.run_with_cache(cf, [name])

        def fn(z, hook):
            z = z.clone()
            z[:, :, head] = cache[name][:, :, head]
            return z

        with torch.no_grad():
            return metric(m.run_with_hooks(clean, [(name, fn)])[:, -1]).mean().item()

    def resample_wrong_head(m, clean, cf, metric, layer, h):
        return resample(m, clean, cf, metric, layer, (h + 1) % 4)

    context = {"model": model, "clean": tokens, "counterfactual": counterfactual, "metric": metric,
               "layer": layer, "head": head}  # fmt: skip
    assert passes("7.2", resample, prediction=0.0, **context)
    assert not passes("7.2", resample_wrong_head, **context)


def test_7_3():
    assert passes("7.3", 1.0, 0.0, prediction=(1, 0))
    assert not passes("7.3", 1.0, 0.5)


def test_8_1():
    def score(pattern, period):
        n = pattern.shape[-1]
        queries = torch.arange(n - period, n)
        return pattern[:, queries, queries - period + 1].mean().item()

    def duplicate_score(pattern, period):
        n = pattern.shape[-1]
        queries = torch.arange(n - period, n)
        return pattern[:, queries, queries - period].mean().item()

    assert passes("8.1", score)
    assert not passes("8.1", duplicate_score)


def test_8_2():
    assert passes("8.2", math.log(256), prediction=5.5)
    assert not passes("8.2", math.log2(256))  # bits, not nats


def test_8_3():
    assert passes("8.3", lambda ov: (ov.argmax(1) == torch.arange(len(ov))).float().mean().item())
    assert not passes("8.3", lambda ov: (ov.argmax(0) == torch.arange(len(ov))).float().mean().item() * 0 + 1)


def test_9_1(model, tokens):
    right = {"parallel(10, 10)": True, "middle_repeat(10, 10)": True, "parallel(10, 11)": False}
    assert passes("9.1", right, model=model, tokens=tokens, first=1, prediction=right)
    assert not passes("9.1", {**right, "parallel(10, 11)": True}, model=model, tokens=tokens, first=1)


def up_to(m, t, first):
    """The residual before block ``first``, and the blocks' rotary tables and mask."""
    context = m.context(t.shape[1])
    x = m.embed_tokens(t)
    for block in m.blocks[:first]:
        x = block(x, *context)
    return x, context


def test_9_2(model, tokens):
    def parallel_logits(m, t, first, last, combine):
        x, context = up_to(m, t, first)
        x = combine(torch.stack([m.blocks[i](x, *context) for i in range(first, last + 1)]))
        for block in m.blocks[last + 1 :]:
            x = block(x, *context)
        return m.to_logits(x)

    def by_hand(m, t, first, last):
        return parallel_logits(m, t, first, last, lambda outputs: outputs.mean(0))

    def summed(m, t, first, last):  # adds the outputs instead of averaging them
        return parallel_logits(m, t, first, last, lambda outputs: outputs.sum(0))

    assert passes("9.2", by_hand, model=model, tokens=tokens, first=1, last=2)
    assert not passes("9.2", summed, model=model, tokens=tokens, first=1, last=2)
    assert plans.parallel(4, 1, 2)  # the plan the check compares with exists for this model


def test_9_3(model, tokens):
    def norms(m, t, first, last):
        x, context = up_to(m, t, first)
        parallel = torch.stack([m.blocks[i](x, *context) for i in range(first, last + 1)]).mean(0)
        sequential = x
        for i in range(first, last + 1):
            sequential = m.blocks[i](sequential, *context)
        return (parallel - x).norm(dim=-1).median().item(), (sequential - x).norm(dim=-1).median().item()

    def output_norms(m, t, first, last):  # the outputs' norms, not the updates'
        x, context = up_to(m, t, first)
        parallel = torch.stack([m.blocks[i](x, *context) for i in range(first, last + 1)]).mean(0)
        return parallel.norm(dim=-1).median().item(), x.norm(dim=-1).median().item()

    context = {"model": model, "tokens": tokens, "first": 1, "last": 2}
    assert passes("9.3", norms, prediction=2.0, **context)
    assert not passes("9.3", output_norms, **context)


def test_10_1():
    def attention_at(pattern, queries, keys):
        return pattern[torch.arange(len(queries)), queries, keys].mean().item()

    def transposed(pattern, queries, keys):
        return pattern[torch.arange(len(queries)), keys, queries].mean().item()

    assert passes("10.1", attention_at)
    assert not passes("10.1", transposed)


def test_10_2(tokens):
    model = tiny()
    with torch.no_grad():  # a name mover that matters: its head writes 20 times louder
        model.blocks[3].attn.W_O.weight[:, :8].mul_(20)
    prompts = ContrastSet(["p"] * 3, tokens, torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), tokens.flip(0))
    circuit, movers = [Head(3, 0), Head(3, 1), Head(2, 2)], [Head(3, 0)]
    means = head_means(model, prompts.counterfactual)
    from resid.tools.circuits import ablated_logit_diff

    rest = [h for h in all_heads(model) if h not in [Head(3, 1), Head(2, 2)]]
    kept = ablated_logit_diff(model, prompts, rest, means).mean().item()
    with_movers = ablated_logit_diff(model, prompts, [h for h in all_heads(model) if h not in circuit], means)
    context = {"model": model, "prompts": prompts, "circuit": circuit, "name_movers": movers, "means": means}
    assert passes("10.2", kept, prediction="yes", **context)
    assert not passes("10.2", with_movers.mean().item(), **context)


def test_10_3(model):
    def value_logits(m, layer, neuron):
        return m.direction_logits(m.blocks[layer].mlp.W_out.weight[:, neuron][None])[0]

    def input_vector_logits(m, layer, neuron):
        return m.direction_logits(m.blocks[layer].mlp.W_in.weight[neuron][None])[0]

    assert passes("10.3", value_logits, model=model, layer=1, neuron=7)
    assert not passes("10.3", input_vector_logits, model=model, layer=1, neuron=7)


# --- the protocol -------------------------------------------------------------------------------


def test_a_prediction_comes_first_and_the_answer_is_not_shown_before(capsys):
    assert not exercises.check("8.2", math.log(256))
    refused = capsys.readouterr().out
    assert "predict" in refused and "5.55" not in refused and "5.5" not in refused
    exercises.predict("8.2", 4.0)
    assert exercises.check("8.2", math.log(256))
    shown = capsys.readouterr().out
    assert "You predicted 4.0" in shown and "5.55" in shown


def test_a_wrong_prediction_is_called_off_beside_the_codes_tick(capsys):
    exercises.predict("8.2", 1.0)  # the answer is log 256 = 5.55
    assert exercises.check("8.2", math.log(256))  # the code is right: the check passes
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("✓ 8.2") and "prediction was off" in line
    exercises.predict("8.2", 5.0)
    assert exercises.check("8.2", math.log(256))
    assert "prediction was right" in capsys.readouterr().out


def test_a_prediction_is_judged_by_its_kind():
    right = exercises.prediction_right
    assert right(5.0, 5.55) and not right(3.0, 6.09) and right(0, 0.0) and not right(0.1, 0.0)
    assert right(np.float64(2.0), torch.tensor(1.96)) and right("Yes", True) and not right("no", True)
    assert right(" Rotated", "rotated") and not right("skip", "twice")
    assert right(["SGD", "Muon"], {"Muon", "SGD"}) and not right({"SGD"}, {"SGD", "Muon"})
    assert right((1, 0), (1.0, 0.0)) and not right((1, 0, 0), (1.0, 0.0))
    assert right({"a": 1, "b": "yes"}, {"a": 1.1, "b": True}) and not right({"a": 1}, {"a": 1, "b": 9})
    assert right("my guess", 515) is None and right(object(), 1.0) is None  # nothing said of these


def test_a_stub_or_a_failing_answer_is_one_line(capsys):
    def stub(acts):
        raise NotImplementedError

    assert not exercises.check("1.1", stub)
    assert not exercises.check("1.1", lambda acts: acts.foo)
    assert not exercises.check("1.1", ...)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("✗ 1.1") for line in lines)
    with pytest.raises(KeyError, match="no exercise"):
        exercises.check("99.1", stub)


def test_every_exercise_in_the_chapters_is_registered_with_a_starter_that_checks_it():
    in_chapters = []
    for name in book.chapters():
        text = book.source(name).read_text()
        numbers = re.findall(r"^# ### Exercise (\d+\.\d+)", text, flags=re.M)
        in_chapters += numbers
        starters = [c for c in book.handout(name).cells if "starter" in c.metadata.get("tags", [])]
        checked = {m for c in starters for m in re.findall(r'exercises\.check\("(\d+\.\d+)"', c.source)}
        assert checked == set(numbers), f"{name}: starters check {sorted(checked)}, exercises {numbers}"
    drafts = book.NOTEBOOKS / "drafts"  # a draft carries the exercises of the chapter it supersedes
    in_drafts = []  # and may add some, registered ahead of its promotion
    for name in book.chapters(drafts):
        numbers = re.findall(r"^# ### Exercise (\d+\.\d+)", book.source(name, drafts).read_text(), flags=re.M)
        in_drafts += numbers
        starters = [c for c in book.handout(name, drafts).cells if "starter" in c.metadata.get("tags", [])]
        checked = {m for c in starters for m in re.findall(r'exercises\.check\("(\d+\.\d+)"', c.source)}
        assert checked == set(numbers) and set(numbers) <= set(exercises.EXERCISES), f"draft {name}"
    registered = sorted(exercises.EXERCISES)
    assert sorted(set(in_chapters) | set(in_drafts)) == registered, (
        "an exercise without a check, or the reverse"
    )
    table = exercises.catalogue()
    assert table["difficulty"].between(1, 3).all() and (table["minutes"] > 0).all()


def test_every_exercise_heading_is_followed_by_its_kind_difficulty_and_time():
    drafts = book.NOTEBOOKS / "drafts"
    sources = [book.source(n) for n in book.chapters()] + [
        book.source(n, drafts) for n in book.chapters(drafts)
    ]
    for path in sources:
        name, text = path.stem, path.read_text()
        for number, following in re.findall(r"^# ### Exercise (\d+\.\d+).*\n#\n# (.*)$", text, flags=re.M):
            assert following == exercises.byline(number), f"{name}, exercise {number}: {following!r}"
        headings = re.findall(r"^# ### Exercise", text, flags=re.M)
        assert len(headings) == len(re.findall(r"difficulty \d of 3", text)), name


# --- the fourth exercise of each chapter that has one ------------------------------------------


def test_1_4():
    def scale_free(acts, threshold):
        rms = acts.float().pow(2).mean(-1, keepdim=True).sqrt()
        return torch.nonzero((acts.float().abs() > threshold * rms).any(0)).flatten()

    def absolute(acts, threshold):
        return torch.nonzero((acts.abs() > threshold).any(0)).flatten()

    def global_rms(acts, threshold):  # one RMS for the whole tensor, not per token
        return torch.nonzero((acts.abs() > threshold * acts.pow(2).mean().sqrt()).any(0)).flatten()

    assert passes("1.4", scale_free, prediction="no")
    assert not passes("1.4", absolute)
    assert not passes("1.4", global_rms)


def test_2_4():
    from scipy import stats as scipy_stats

    def t_interval(values, level=0.95):
        x = torch.tensor(values, dtype=torch.float64)
        half = scipy_stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std() / len(x) ** 0.5
        return x.mean().item(), (x.mean() - half).item(), (x.mean() + half).item()

    def z_interval(values, level=0.95):
        x = torch.tensor(values, dtype=torch.float64)
        half = 1.96 * x.std() / len(x) ** 0.5
        return x.mean().item(), (x.mean() - half).item(), (x.mean() + half).item()

    assert passes("2.4", t_interval, prediction=2.0)
    assert not passes("2.4", z_interval)


def test_7_4(model, tokens):
    metric = LogitDiff(torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]))
    counterfactual = torch.randint(0, 256, tokens.shape, generator=torch.Generator().manual_seed(2))

    def patch_position(m, clean, cf, metric, layer, position):
        name = f"blocks.{layer}.hook_resid_pre"
        _, cache = m.run_with_cache(cf, [name])

        def fn(resid, hook):
            resid = resid.clone()
            resid[:, position] = cache[name][:, position]
            return resid

        return metric(m.run_with_hooks(clean, [(name, fn)])[:, -1]).mean().item()

    def patch_every_position_after(m, clean, cf, metric, layer, position):
        name = f"blocks.{layer}.hook_resid_pre"
        _, cache = m.run_with_cache(cf, [name])

        def fn(resid, hook):
            resid = resid.clone()
            resid[:, position:] = cache[name][:, position:]
            return resid

        return metric(m.run_with_hooks(clean, [(name, fn)])[:, -1]).mean().item()

    context = {"model": model, "clean": tokens, "counterfactual": counterfactual, "metric": metric,
               "layer": 2, "position": 5}  # fmt: skip
    assert passes("7.4", patch_position, **context)
    assert not passes("7.4", patch_every_position_after, **context)


def test_8_4():
    def previous_token_score(pattern):
        q = torch.arange(1, pattern.shape[-1])
        return pattern[:, q, q - 1].mean().item()

    def including_first(pattern):
        q = torch.arange(pattern.shape[-1])
        return pattern[:, q, (q - 1).clamp(min=0)].mean().item()

    assert passes("8.4", previous_token_score)
    assert not passes("8.4", including_first)


def test_6_2(model, tokens):
    from resid.tools import attribution

    prompt = tokens[:1]
    context = {
        "score": attribution.prediction_score(model, prompt, 5, 9),
        "inputs": model.embed_tokens(prompt).detach(),
        "baseline": attribution.mean_embedding_baseline(model, prompt),
    }

    def riemann(score, inputs, baseline, steps, first=1):
        alphas = torch.arange(first, first + steps, dtype=inputs.dtype) / steps
        path = (baseline + alphas.view(-1, 1, 1) * (inputs - baseline)).requires_grad_()
        (gradient,) = torch.autograd.grad(score(path).sum(), path)
        return ((inputs - baseline)[0] * gradient.mean(0)).sum(-1)

    def left_riemann(score, inputs, baseline, steps):  # k = 0..m-1: the baseline's gradient, not the input's
        return riemann(score, inputs, baseline, steps, first=0)

    assert passes("6.2", riemann, prediction=0.1, **context)
    assert not passes("6.2", left_riemann, **context)


def test_9_4(model, tokens):
    def twice(n, first, last):
        return plans.sequential(
            list(range(last + 1)) + list(range(first, last + 1)) + list(range(last + 1, n))
        )

    def centre_repeated(n, first, last):  # the paper's middle repeat: the same length, one block
        return plans.middle_repeat(n, first, last)

    context = {"model": model, "tokens": tokens, "first": 1, "last": 2}
    assert passes("9.4", twice, prediction="skip", **context)
    assert not passes("9.4", centre_repeated, **context)
    assert not passes("9.4", lambda n, first, last: list(range(n)), **context)


def test_10_4(tokens):
    model = tiny()
    prompts = ContrastSet(["p"] * 3, tokens, torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6]), tokens.flip(0))
    circuit = [Head(3, 0), Head(2, 1), Head(1, 3)]
    means = head_means(model, prompts.counterfactual)

    def alone(m, p, kept, layer_means, fill=None):
        hooks = []
        for layer in range(m.cfg.n_layers):
            outside = [h for h in range(m.cfg.n_heads) if Head(layer, h) not in kept]

            def hook(z, hook_point, layer=layer, outside=outside):
                z = z.clone()
                z[:, :, outside] = layer_means[layer][:, outside] if fill is None else fill
                return z

            hooks.append((f"blocks.{layer}.attn.hook_z", hook))
        logits = m.run_with_hooks(p.tokens, hooks)[:, -1]
        return LogitDiff(p.answers, p.foils)(logits)

    context = {"model": model, "prompts": prompts, "circuit": circuit, "means": means}
    assert passes("10.4", alone, **context)
    assert not passes(
        "10.4", lambda m, p, kept, layer_means: alone(m, p, kept, layer_means, fill=0.0), **context
    )


def test_6_3():
    def area(curve):
        return sum(curve[0] - c for c in curve[1:]) / (len(curve) - 1) / abs(curve[0])

    def signed(curve):  # divides by the score itself: a negative score's drop changes sign
        return sum(curve[0] - c for c in curve[1:]) / (len(curve) - 1) / curve[0]

    assert passes("6.3", area)
    assert not passes("6.3", signed)


def test_10_5():
    def interchange(base, source, basis):
        projector = basis @ basis.T
        return base - base @ projector + source @ projector

    def coordinates_only(base, source, basis):  # copies the basis' rows as if they were coordinates
        out = base.clone()
        chosen = basis.abs().sum(1) > 0
        out[:, chosen] = source[:, chosen]
        return out

    assert passes("10.5", interchange)
    assert not passes("10.5", coordinates_only)


def test_11_1():
    def sign(ov):
        eigenvalues = torch.linalg.eigvals(ov.double())
        return (eigenvalues.real.sum() / eigenvalues.abs().sum()).item()

    def trace_only(ov):  # the real parts without the normalisation by |λ|
        return torch.trace(ov).item()

    assert passes("11.1", sign)
    assert not passes("11.1", trace_only)


def test_11_2():
    def share(acts):
        acts = acts.double()
        return (acts.mean(0).var(unbiased=False) / acts.flatten().var(unbiased=False)).item()

    def unbiased_share(acts):  # sample variances: the ratio drifts with the number of windows
        return (acts.mean(0).var() / acts.flatten().var()).item() * 1.5

    assert passes("11.2", share)
    assert not passes("11.2", unbiased_share)


def test_11_3():
    def anisotropy(unit):
        flat = unit.double().flatten(0, 1)
        window = torch.arange(unit.shape[0]).repeat_interleave(unit.shape[1])
        return (flat @ flat.T)[window[:, None] != window[None, :]].mean().item()

    def with_own_window(unit):  # every pair, those within a window too
        flat = unit.double().flatten(0, 1)
        return (flat @ flat.T).mean().item()

    assert passes("11.3", anisotropy, prediction="no")
    assert not passes("11.3", with_own_window, prediction="no")


def test_11_4():
    def syntactic_score(row, subject, first):
        others = [k for k in range(first + 1, len(row) - 1) if k != subject]
        return (row[subject] - row[others].mean()).item()

    def with_the_sinks(row, subject, first):  # the keys up to `first` counted in the baseline
        others = [k for k in range(len(row) - 1) if k != subject]
        return (row[subject] - row[others].mean()).item()

    assert passes("11.4", syntactic_score, prediction="negative")
    assert not passes("11.4", with_the_sinks, prediction="negative")


def _loss_gradients(model, windows):
    rows = []
    for window in windows:
        loss = torch.nn.functional.cross_entropy(model(window[None, :-1])[0], window[1:])
        rows.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))]))
    return torch.stack(rows)


def test_12_1():
    def tracin_step(model, lr, train, test):
        return lr * _loss_gradients(model, test) @ _loss_gradients(model, train).T

    def without_lr(model, lr, train, test):
        return _loss_gradients(model, test) @ _loss_gradients(model, train).T

    assert passes("12.1", tracin_step)
    assert not passes("12.1", without_lr)


def test_12_2():
    def damped_solve(rows, v, d):
        n = rows.shape[0]
        small = n * d * torch.eye(n, dtype=rows.dtype) + rows @ rows.T
        return (v - rows.T @ torch.linalg.solve(small, rows @ v)) / d

    def without_n(rows, v, d):  # J^T J + d I: the Fisher's 1/n forgotten
        small = d * torch.eye(rows.shape[0], dtype=rows.dtype) + rows @ rows.T
        return (v - rows.T @ torch.linalg.solve(small, rows @ v)) / d

    assert passes("12.2", damped_solve)
    assert not passes("12.2", without_n)


def test_12_3():
    schedule = tda.Schedule(Config(vocab_size=256, n_ctx=16, d_model=16, n_layers=1, n_heads=2, d_mlp=32),
                            epochs=4, batch_size=8, lr=1e-2, checkpoint_epochs=(2, 4))  # fmt: skip
    windows = torch.randint(97, 123, (24, 17), generator=torch.Generator().manual_seed(0))
    train = tda.plant(windows, b"QZXJ-QZXJ-", [1, 5], seed=0)
    prompts = tda.plant(windows[:2], b"QZXJ-QZXJ-", [0, 1], at=7)
    trained = tda.train_windows(train, schedule)
    context = {"trained": trained, "train": train, "prompts": prompts, "last": 9, "planted": [1, 5]}

    def last_only(trained, train, prompts, last):
        return tda.tracin(tda.Trained(trained.model, trained.checkpoints[-1:], []), train, prompts, last)

    def every_checkpoint(trained, train, prompts, last):
        return tda.tracin(trained, train, prompts, last)

    assert passes("12.3", last_only, prediction="yes", **context)
    assert not passes("12.3", every_checkpoint, prediction="yes", **context)


def test_12_4():
    rises = [0.01, 0.03, -0.02, 0.04]
    assert passes("12.4", 0.015, random_rises=rises)
    assert not passes("12.4", 0.0, random_rises=rises)


def test_13_1():
    def kl_from_final(final, lens):
        p, q = final.log_softmax(-1), lens.log_softmax(-1)
        return (p.exp() * (p - q)).sum(-1)

    def reversed_kl(final, lens):  # KL(lens || final): the lens's mass weighs the ratio
        p, q = final.log_softmax(-1), lens.log_softmax(-1)
        return (q.exp() * (q - p)).sum(-1)

    assert passes("13.1", kl_from_final)
    assert not passes("13.1", reversed_kl)


def test_13_2():
    def fit_translator(h, final):
        inputs = torch.cat([h, torch.ones(len(h), 1)], 1).double()
        solution = torch.linalg.lstsq(inputs, (final - h).double()).solution
        return solution[:-1].float(), solution[-1].float()

    def without_the_residual(h, final):  # regresses final on h: A is off by the identity
        inputs = torch.cat([h, torch.ones(len(h), 1)], 1).double()
        solution = torch.linalg.lstsq(inputs, final.double()).solution
        return solution[:-1].float(), solution[-1].float()

    assert passes("13.2", fit_translator)
    assert not passes("13.2", without_the_residual)


def test_13_3():
    top1 = torch.tensor([[0, 1, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)

    def first_decoding(table):
        stays = table.flip(0).int().cumprod(0).flip(0).bool()
        return torch.where(stays.any(0), table.shape[0] - stays.sum(0), table.shape[0])

    def first_top1(table):  # the first boundary where it is on top, even if it drops out again
        return table.int().argmax(0)

    assert passes("13.3", first_decoding, prediction=0.5, top1=top1)
    assert not passes("13.3", first_top1, prediction=0.5, top1=top1)


def test_13_4():
    logit_kl = torch.tensor([[9.0, 8.0], [3.0, 4.0], [0.0, 0.0]])
    assert passes("13.4", 0, prediction=0, logit_kl=logit_kl)
    assert not passes("13.4", 2, prediction=0, logit_kl=logit_kl)


def test_5_4():
    def scalar_adam(W, grads, lr, betas, eps):
        m, v = torch.zeros_like(W), torch.zeros((), dtype=W.dtype)
        for t, G in enumerate(grads, start=1):
            m = betas[0] * m + (1 - betas[0]) * G
            v = betas[1] * v + (1 - betas[1]) * G.pow(2).mean()
            W = W - lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps)
        return W

    def adam(W, grads, lr, betas, eps):  # one second moment per entry: AdamW, not ScalarAdamW
        m, v = torch.zeros_like(W), torch.zeros_like(W)
        for t, G in enumerate(grads, start=1):
            m = betas[0] * m + (1 - betas[0]) * G
            v = betas[1] * v + (1 - betas[1]) * G.pow(2)
            W = W - lr * (m / (1 - betas[0] ** t)) / ((v / (1 - betas[1] ** t)).sqrt() + eps)
        return W

    assert passes("5.4", scalar_adam, prediction="no")
    assert not passes("5.4", adam, prediction="no")
