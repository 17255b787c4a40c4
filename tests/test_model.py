import pytest
import torch

from resid.model import Config, Transformer, fold_norm_gains, rotate_residual
from resid.model.basis import write
from resid.stats import haar_rotation


def tiny(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = Config(**{"d_model": 32, "n_layers": 2, "n_heads": 4, "d_mlp": 64, "n_ctx": 16, **overrides})
    return Transformer(cfg).eval()


TOKENS = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))


def test_hook_names_cover_every_layer():
    model = tiny(n_layers=3)
    names = set(model.hook_points())
    per_block = ["hook_resid_pre", "hook_attn_in", "hook_attn_out", "hook_resid_mid", "hook_mlp_in",
                 "hook_mlp_out", "hook_resid_post", "attn.hook_pattern", "attn.hook_z", "attn.hook_q",
                 "mlp.hook_post", "ln1.hook_normalized"]  # fmt: skip
    for i in range(3):
        for name in per_block:
            assert f"blocks.{i}.{name}" in names
    assert {"hook_embed", "ln_final.hook_normalized"} <= names


def test_run_with_cache_shapes_and_final_residual():
    model = tiny()
    logits, cache = model.run_with_cache(TOKENS)
    assert cache["blocks.1.attn.hook_pattern"].shape == (2, 4, 16, 16)
    assert cache["blocks.0.attn.hook_z"].shape == (2, 16, 4, 8)
    # The last residual is the raw block output; the logits come from it through the final norm.
    final = cache[model.resid_names()[-1]]
    torch.testing.assert_close(model.to_logits(final), logits)
    patterns = cache["blocks.0.attn.hook_pattern"]
    torch.testing.assert_close(patterns.sum(-1), torch.ones(2, 4, 16))
    assert torch.all(patterns.triu(1) == 0)  # causal


def test_manual_layer_by_layer_forward_equals_model():
    model = tiny(norm="rmsnorm", mlp="swiglu", positional="rotary", n_kv_heads=2)
    x = model.embed_tokens(TOKENS)
    rope, mask = model.context(TOKENS.shape[1])
    for block in model.blocks:
        x = block(x, rope, mask)
    torch.testing.assert_close(model.to_logits(x), model(TOKENS), rtol=0, atol=0)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm": "rmsnorm", "positional": "rotary", "n_kv_heads": 2, "bias": True},
        {"norm": "basisfree", "rotation": "independent"},
    ],
    ids=["layernorm", "gqa-rotary-bias", "rotated"],
)
def test_attention_by_head_sums_to_the_attention_output_and_takes_an_input_per_head(overrides):
    model = tiny(**overrides)
    block, name = model.blocks[1], "blocks.1.hook_resid_pre"
    _, cache = model.run_with_cache(TOKENS, [name, "blocks.1.hook_attn_out"])
    rope, _ = model.context(TOKENS.shape[1])
    x = cache[name]
    by_head = block.attention_by_head(x, rope)  # [batch, pos, head, d_model]
    bias = 0 if block.attn.W_O.bias is None else write(block.attn.W_O.bias, block.R_attn_out)
    torch.testing.assert_close(by_head.sum(2) + bias, cache["blocks.1.hook_attn_out"], rtol=1e-5, atol=1e-6)
    # the same residual given to each head separately is the shared input
    per_head = x.unsqueeze(2).repeat(1, 1, 4, 1)
    torch.testing.assert_close(block.attention_by_head(per_head, rope), by_head, rtol=1e-5, atol=1e-6)
    # a head reads only its own input: changing head 2's leaves the others' writes alone
    changed = per_head.clone()
    changed[:, :, 2] = torch.randn_like(changed[:, :, 2])
    moved = block.attention_by_head(changed, rope)
    torch.testing.assert_close(moved[:, :, [0, 1, 3]], by_head[:, :, [0, 1, 3]], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(moved[:, :, 2], by_head[:, :, 2])
    # queries from one stream, keys and values from another
    other = torch.randn_like(x)
    mixed = block.attention_by_head(x, rope, key_input=other, value_input=other)
    assert not torch.allclose(mixed, by_head)
    torch.testing.assert_close(block.attention_by_head(x, rope, key_input=x, value_input=x), by_head)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_norm_scale_hook_reads_and_freezes_the_scale(norm):
    model = tiny(norm=norm, bias=True)
    logits, cache = model.run_with_cache(TOKENS, ["ln_final.hook_scale", "blocks.1.hook_resid_post"])
    scale = cache["ln_final.hook_scale"]
    assert scale.shape == (2, 16, 1)
    torch.testing.assert_close(model(TOKENS), logits, rtol=1e-5, atol=1e-5)  # hooked or not, the same
    # frozen at the residual's own scale, the norm is linear: halves map to halves
    resid = cache["blocks.1.hook_resid_post"]
    ln = model.ln_final
    parts = ln.linear(resid / 3, scale) + ln.linear(2 * resid / 3, scale)
    bias = 0 if ln.bias is None else ln.bias
    torch.testing.assert_close(parts + bias, ln(resid), rtol=1e-5, atol=1e-5)


def test_pattern_path_equals_fused_attention():
    model = tiny()
    fused = model(TOKENS)
    explicit, _ = model.run_with_cache(TOKENS, names=lambda n: n.endswith("hook_pattern"))
    torch.testing.assert_close(explicit, fused, rtol=1e-5, atol=1e-5)


def test_patching_the_clean_activation_changes_nothing():
    model = tiny()
    clean, cache = model.run_with_cache(TOKENS, ["blocks.1.hook_resid_mid"])
    patched = model.run_with_hooks(TOKENS, [("blocks.1.hook_resid_mid", lambda a, h: cache[h.name])])
    assert torch.equal(clean, patched)
    zeroed = model.run_with_hooks(TOKENS, [("blocks.1.hook_resid_mid", lambda a, h: torch.zeros_like(a))])
    assert not torch.allclose(clean, zeroed)


def test_hooks_are_removed_after_use():
    model = tiny()
    with model.hooks([("blocks.0.hook_mlp_out", lambda a, h: a * 0)]):
        pass
    assert not any(p.has_hooks() for p in model.hook_points().values())
    with pytest.raises(KeyError, match="no hook point"):
        model.run_with_hooks(TOKENS, [("blocks.9.nothing", lambda a, h: a)])


def test_basis_free_model_is_rotation_invariant():
    model = tiny(norm="basisfree").double()
    rotated = rotate_residual(model, haar_rotation(32, seed=1, dtype=torch.float64))
    torch.testing.assert_close(rotated(TOKENS), model(TOKENS), rtol=0, atol=1e-12)
    model32 = tiny(norm="basisfree")
    rotated32 = rotate_residual(model32, haar_rotation(32, seed=1))
    assert abs(rotated32.loss(TOKENS).item() - model32.loss(TOKENS).item()) < 1e-5
    # The residual stream itself is rotated.
    _, a = model.run_with_cache(TOKENS, ["blocks.0.hook_resid_post"])
    _, b = rotated.run_with_cache(TOKENS, ["blocks.0.hook_resid_post"])
    R = haar_rotation(32, seed=1, dtype=torch.float64)
    torch.testing.assert_close(b["blocks.0.hook_resid_post"], a["blocks.0.hook_resid_post"] @ R)


def test_layernorm_model_is_not_rotation_invariant():
    model = tiny(norm="layernorm")
    with torch.no_grad():  # trained LayerNorm gains are far from 1: make them so here
        for block in model.blocks:
            block.ln1.weight.uniform_(0.2, 3.0)
    with pytest.raises(ValueError, match="not rotation-invariant"):
        rotate_residual(model, haar_rotation(32))
    naive = rotate_residual(model, haar_rotation(32), strict=False)
    assert abs(naive.loss(TOKENS).item() - model.loss(TOKENS).item()) > 1e-3


def test_folding_rmsnorm_gains_then_rotating_keeps_the_function():
    model = tiny(norm="rmsnorm", mlp="swiglu", positional="rotary").double()
    with torch.no_grad():
        for norm in [model.ln_final] + [b.ln1 for b in model.blocks] + [b.ln2 for b in model.blocks]:
            norm.weight.uniform_(0.3, 3.0)
    folded = fold_norm_gains(model)
    assert folded.cfg.norm == "basisfree"
    torch.testing.assert_close(folded(TOKENS), model(TOKENS), rtol=0, atol=1e-12)
    rotated = rotate_residual(folded, haar_rotation(32, seed=2, dtype=torch.float64))
    torch.testing.assert_close(rotated(TOKENS), model(TOKENS), rtol=0, atol=1e-12)


@pytest.mark.parametrize("rotation", ["shared", "independent"])
def test_built_in_rotations_separate_residual_and_computation_basis(rotation):
    model = tiny(norm="basisfree", rotation=rotation)
    block = model.blocks[0]
    assert block.R_attn_in is not None
    assert (block.R_attn_in is block.R_mlp_in) == (rotation == "shared")
    _, cache = model.run_with_cache(TOKENS, ["blocks.0.hook_resid_mid", "blocks.0.hook_mlp_in"])
    normed = block.ln2(cache["blocks.0.hook_resid_mid"])
    torch.testing.assert_close(cache["blocks.0.hook_mlp_in"], normed @ block.R_mlp_in)


def test_padding_does_not_change_real_tokens_in_an_encoder():
    model = tiny(
        causal=False, post_norm=True, embed_norm=True, bias=True, lm_head=False, tie_embeddings=False
    )
    short = TOKENS[:1, :10]
    padded = torch.cat([short, torch.zeros(1, 6, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 10), torch.zeros(1, 6)], dim=1).long()
    torch.testing.assert_close(model(padded, attention_mask=mask)[:, :10], model(short), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"norm": "batchnorm"}, "Config.norm"),
        ({"n_heads": 5}, "divisible"),
        ({"rotation": "some"}, "rotation"),
    ],
)
def test_bad_config_gives_a_clear_error(bad, message):
    with pytest.raises(ValueError, match=message):
        Config(**bad)


def test_context_longer_than_model_is_a_clear_error():
    with pytest.raises(ValueError, match="exceed the model's context"):
        tiny()(torch.zeros(1, 17, dtype=torch.long))


def test_residual_stream_matches_the_cached_hook_points():
    model = tiny(n_layers=3)
    stream = model.residual_stream(TOKENS, batch_size=1)
    _, cache = model.run_with_cache(TOKENS, model.resid_names())
    expected = torch.stack([cache[name] for name in model.resid_names()]).flatten(1, 2)
    assert stream.shape == (4, 32, 32)
    torch.testing.assert_close(stream, expected)


def test_folding_layernorm_centres_writes_and_keeps_the_function():
    model = tiny(norm="layernorm").double()
    with torch.no_grad():
        for norm in [model.ln_final] + [b.ln1 for b in model.blocks] + [b.ln2 for b in model.blocks]:
            norm.weight.uniform_(0.3, 3.0)
    folded = fold_norm_gains(model)
    torch.testing.assert_close(folded(TOKENS), model(TOKENS), rtol=0, atol=1e-10)
    _, cache = folded.run_with_cache(TOKENS, folded.resid_names())
    assert all(cache[n].mean(-1).abs().max() < 1e-10 for n in folded.resid_names())  # a centred stream
    rotated = rotate_residual(folded, haar_rotation(32, seed=3, dtype=torch.float64))
    torch.testing.assert_close(rotated(TOKENS), model(TOKENS), rtol=0, atol=1e-10)


def test_a_float64_models_loss_is_computed_in_float64():
    # a float32 cross-entropy would hide every difference below ~1e-7, and with it the exactness
    # of a rotation or a fold that the chapters check in float64
    from resid.model import next_token_loss

    logits = torch.randn(2, 5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(1))
    nudged = logits.clone()
    nudged[0, 0, 0] += 1e-9
    assert next_token_loss(logits, tokens).dtype == torch.float64
    assert next_token_loss(nudged, tokens) != next_token_loss(logits, tokens)
    assert next_token_loss(logits.bfloat16(), tokens).dtype == torch.float32


@pytest.mark.parametrize("rotation", ["none", "independent"])
def test_per_head_weights_rebuild_queries_and_the_attention_output(rotation):
    """W_Q, W_K, W_V and W_O act on the residual basis with the block's rotations folded in,
    grouped-query heads repeated, as TransformerLens lays them out: ``[layer, head, ...]``."""
    torch.manual_seed(0)
    cfg = Config(n_layers=2, n_heads=4, n_kv_heads=2, d_model=32, d_mlp=64, positional="rotary",
                 norm="rmsnorm", rotation=rotation)  # fmt: skip
    model = Transformer(cfg).double().eval()
    tokens = torch.randint(0, 256, (2, 6))
    names = ["blocks.1.hook_resid_pre", "blocks.1.attn.hook_q", "blocks.1.attn.hook_v",
             "blocks.1.attn.hook_z", "blocks.1.hook_attn_out"]  # fmt: skip
    _, cache = model.run_with_cache(tokens, names)
    block, normalised = model.blocks[1], model.blocks[1].ln1(cache["blocks.1.hook_resid_pre"])
    assert (
        model.W_Q.shape == (2, 4, 32, 8)
        and model.W_O.shape == (2, 4, 8, 32)
        and model.W_K.shape == (2, 4, 32, 8)
    )
    queries = torch.einsum("bpd,hde->bphe", normalised, model.W_Q[1])
    torch.testing.assert_close(queries, cache["blocks.1.attn.hook_q"])
    values = torch.einsum("bpd,hde->bphe", normalised, model.W_V[1])[:, :, ::2]  # one per key/value head
    torch.testing.assert_close(values, cache["blocks.1.attn.hook_v"])
    written = torch.einsum("bphe,hed->bpd", cache["blocks.1.attn.hook_z"], model.W_O[1])
    torch.testing.assert_close(written, cache["blocks.1.hook_attn_out"])
    torch.testing.assert_close(model.OV(1, 3), model.W_V[1, 3] @ model.W_O[1, 3])
    assert model.QK(0, 1).shape == (32, 32) and block.attn.W_Q.weight.shape == (32, 32)


def test_the_rotations_chapters_measurements_show_exact_invariance_where_the_algebra_says():
    """experiments.rotation_invariance and layernorm_rotation, the measurements the Rotations
    chapter files in its runs' records: a basis-free model's float64 loss moves by rounding only
    under a rotation, 16-bit formats cost more than float32; a LayerNorm model folded and
    rotated keeps its loss, a naive rotation does not."""
    from resid.train import experiments

    torch.manual_seed(0)
    tokens = torch.randint(0, 256, (3, 13))
    basis_free = Transformer(Config(d_model=32, n_layers=2, n_heads=4, d_mlp=64, n_ctx=16, norm="basisfree"))
    table = experiments.rotation_invariance(basis_free.eval(), tokens, n_rotations=2)
    assert len(table) == 2 * len(experiments.PRECISIONS)
    by = table.set_index(["rotation", "precision"])
    assert by.xs("float64", level="precision")["Δloss"].abs().max() < 1e-10
    assert (by.xs("float64", level="precision")["rounding cost"] == 0).all()
    cost = table.groupby("precision")["rounding cost"].apply(lambda c: c.abs().max())
    assert cost["float32"] < cost["bfloat16"]
    layernorm = Transformer(Config(d_model=32, n_layers=2, n_heads=4, d_mlp=64, n_ctx=16)).eval()
    with torch.no_grad():  # gains away from 1, as training leaves them
        for name, p in layernorm.named_parameters():
            if name.endswith(("ln1.weight", "ln2.weight", "ln_final.weight")):
                p.mul_(1 + 0.3 * torch.rand(p.shape))
    folded = experiments.layernorm_rotation(layernorm, tokens, n_rotations=2)
    assert (
        folded["folded, not rotated |Δloss|"].max() < 1e-10
        and folded["folded + rotated |Δloss|"].max() < 1e-10
    )
    assert folded["naive |Δloss|"].min() > 1e-4
