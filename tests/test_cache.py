import pytest
import torch

from resid.model import Config, Transformer
from resid.model.basis import write
from resid.model.cache import Head, act_name

TOKENS = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(0))


def tiny(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = Config(**{"d_model": 32, "n_layers": 3, "n_heads": 4, "d_mlp": 64, "n_ctx": 16, **overrides})
    return Transformer(cfg).double().eval()


ARCHITECTURES = {
    "gpt2-like": {"bias": True},
    "llama-like": {"norm": "rmsnorm", "mlp": "swiglu", "positional": "rotary", "n_kv_heads": 2},
    "rotated": {"norm": "basisfree", "rotation": "independent"},
}


def test_short_names_and_head_labels_follow_transformer_lens():
    model = tiny()
    _, cache = model.run_with_cache(TOKENS)
    assert torch.equal(cache["z", 1], cache["blocks.1.attn.hook_z"])
    assert torch.equal(cache["pattern", 2], cache["blocks.2.attn.hook_pattern"])
    assert (
        act_name("resid_post", 0) == "blocks.0.hook_resid_post" and act_name("scale") == "ln_final.hook_scale"
    )
    with pytest.raises(KeyError, match="short names"):
        cache["nonsense", 0]
    _, partial = model.run_with_cache(TOKENS, ["hook_embed"])
    with pytest.raises(KeyError, match="run_with_cache"):
        partial["z", 0]
    assert str(Head(3, 2)) == "L3H2" and Head.parse("L3H2") == (3, 2)
    with pytest.raises(ValueError):
        Head.parse("3.2")


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_decompositions_sum_to_the_residual_stream(arch):
    model = tiny(**ARCHITECTURES[arch])
    logits, cache = model.run_with_cache(TOKENS)
    final = cache["resid_post", 2]
    accumulated, labels = cache.accumulated_resid(return_labels=True)
    assert labels == ["0_pre", "1_pre", "2_pre", "final_post"] and torch.equal(accumulated[-1], final)
    torch.testing.assert_close(cache.decompose_resid().sum(0), final)
    torch.testing.assert_close(cache.decompose_resid(layer=2).sum(0), cache["resid_pre", 2])
    heads, head_labels = cache.stack_head_results(return_labels=True)
    assert heads.shape == (12, 2, 10, 32) and head_labels[5] == "L1H1"
    bias = model.blocks[1].attn.W_O.bias
    bias = 0 if bias is None else write(bias, model.blocks[1].R_attn_out)
    torch.testing.assert_close(heads[4:8].sum(0) + bias, cache["attn_out", 1])
    # frozen at the run's own scale, the final norm is linear: the images add up
    normed = cache.apply_ln_to_stack(cache.decompose_resid())
    ln_bias = 0 if model.ln_final.bias is None else model.ln_final.bias
    torch.testing.assert_close(normed.sum(0) + ln_bias, model.ln_final(final))
    # the logit attributions of the whole residual are the logits (the final norm's bias aside)
    targets = torch.tensor([5, 7])
    attrs = cache.logit_attrs(cache.accumulated_resid(apply_ln=True, pos_slice=-1), targets)
    bias_logits = 0 if model.ln_final.bias is None else model.unembed.weight[targets] @ model.ln_final.bias
    torch.testing.assert_close(attrs[-1] + bias_logits, logits[:, -1].gather(1, targets[:, None])[:, 0])


def test_a_stack_sliced_without_its_positions_is_refused_with_the_shapes():
    model = tiny(**ARCHITECTURES[next(iter(ARCHITECTURES))])
    _, cache = model.run_with_cache(TOKENS)
    heads = cache.stack_head_results()  # [head, batch, pos, d_model]
    with pytest.raises(ValueError, match=r"pos_slice"):
        cache.apply_ln_to_stack(heads[:, :, -1])
    sliced = cache.apply_ln_to_stack(heads[:, :, -1], pos_slice=-1)
    torch.testing.assert_close(sliced, cache.apply_ln_to_stack(heads)[:, :, -1])


def test_a_head_in_any_spelling_is_one_head():
    assert Head.of("L3H2") == Head.of((3, 2)) == Head.of(Head(3, 2)) == Head(3, 2)
    assert str(Head.of(torch.tensor([1, 0]))) == "L1H0"
    with pytest.raises(ValueError, match="head label"):
        Head.of("3.2")


def test_head_ablations_accept_every_spelling():
    from resid.model import hooks
    from resid.tools import heads

    model = Transformer(Config(d_model=32, n_layers=2, n_heads=4, d_mlp=64, n_ctx=16)).eval()
    means = [torch.zeros(4, 8), torch.zeros(4, 8)]
    by_label = model.run_with_hooks(TOKENS, hooks.replace_heads(["L1H2", "L0H0"], means))
    by_pair = model.run_with_hooks(TOKENS, hooks.replace_heads([(1, 2), Head(0, 0)], means))
    assert torch.equal(by_label, by_pair) and not torch.equal(by_label, model(TOKENS))
    label, pair = (
        heads.ablated_in_context_losses(model, TOKENS, chosen, start=5) for chosen in (["L1H2"], [(1, 2)])
    )
    assert torch.equal(label, pair)
