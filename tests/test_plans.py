import pytest
import torch

from resid.model import Config, Transformer
from resid.tools import plans

N = 6


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = Config(d_model=32, n_layers=N, n_heads=4, d_mlp=64, n_ctx=16, norm="rmsnorm", positional="rotary")
    return Transformer(cfg).eval()


TOKENS = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))


def test_identity_plan_reproduces_the_logits_exactly(model):
    with torch.no_grad():
        assert torch.equal(plans.run_plan(model, TOKENS, plans.identity(N)), model(TOKENS))


def test_skipping_no_layers_is_the_baseline(model):
    assert plans.skip(N, 3, 2) == plans.identity(N)


def test_parallel_group_of_one_layer_is_sequential(model):
    assert torch.equal(
        plans.run_plan(model, TOKENS, plans.parallel(N, 2, 2)),
        plans.run_plan(model, TOKENS, plans.identity(N)),
    )


def test_looped_parallel_with_one_iteration_is_parallel(model):
    assert plans.parallel(N, 1, 4, loops=1) == plans.parallel(N, 1, 4)
    assert not torch.equal(
        plans.run_plan(model, TOKENS, plans.parallel(N, 1, 4, loops=2)),
        plans.run_plan(model, TOKENS, plans.parallel(N, 1, 4)),
    )


def test_parallel_averages_the_layers_outputs(model):
    with torch.no_grad():
        x = model.embed_tokens(TOKENS)
        context = model.context(16)
        x = model.blocks[0](x, *context)
        x = (model.blocks[1](x, *context) + model.blocks[2](x, *context)) / 2
        for i in range(3, N):
            x = model.blocks[i](x, *context)
        expected = model.to_logits(x)
    torch.testing.assert_close(plans.run_plan(model, TOKENS, plans.parallel(N, 1, 2)), expected)


def test_variant_orders():
    assert [s.layers[0] for s in plans.reverse(N, 1, 4)] == [0, 4, 3, 2, 1, 5]
    assert [s.layers[0] for s in plans.middle_repeat(N, 1, 4)] == [0, 2, 2, 2, 2, 5]
    assert [s.layers[0] for s in plans.swap(N, 2)] == [0, 1, 3, 2, 4, 5]
    shuffled = [s.layers[0] for s in plans.shuffle(N, 1, 4, seed=0)]
    assert shuffled[0] == 0 and shuffled[-1] == 5 and sorted(shuffled[1:5]) == [1, 2, 3, 4]
    assert plans.shuffle(N, 1, 4, seed=0) == plans.shuffle(N, 1, 4, seed=0)


def test_prefix_reuse_gives_the_same_outputs_as_separate_runs(model):
    variants = [plans.identity(N), plans.skip(N, 2, 3), plans.reverse(N, 1, 4), plans.parallel(N, 2, 4),
                plans.skip(N, 2, 2), plans.identity(N)]  # fmt: skip
    together = plans.run_plans(model, TOKENS, variants)
    for plan, output in zip(variants, together, strict=True):
        assert torch.equal(output, plans.run_plan(model, TOKENS, plan))


def test_bad_step_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one layer"):
        plans.Step(())


def test_paper_sweep_lists_every_variant_for_every_n():
    sweep = plans.paper_sweep(N, [1, 2], n_shuffles=3)
    assert len(sweep) == 2 * (5 + 3)
    by_key = {(v, n, s): p for v, n, s, p in sweep}
    assert by_key[("skip", 1, 0)] == plans.skip(N, 1, 4)
    assert by_key[("looped parallel", 2, 0)] == plans.parallel(N, 2, 3, loops=3)
    assert by_key[("random order", 1, 2)] == plans.shuffle(N, 1, 4, seed=2)
