"""LRP on tiny random models: relevance is conserved in every architecture family, it is
gradient × input where the model is linear, and a missing rule breaks conservation."""

from dataclasses import replace

import pytest
import torch
from test_circuits import ARCHITECTURES, random_model

from resid.model import Config
from resid.tools import lrp

FAMILIES = {
    **ARCHITECTURES,
    "pythia-like (parallel, partial rotary)": Config(
        n_ctx=16, d_model=32, n_layers=2, n_heads=4, d_mlp=64, parallel=True, positional="rotary",
        rotary_dim=4, bias=True, mlp="gelu_tanh",
    ),
    "gemma-like (sandwich norms, GeGLU, QK-norm, soft-capped scores)": Config(
        n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=1, d_mlp=64, norm="rmsnorm", mlp="geglu",
        positional="rotary", sandwich_norms=True, qk_norm=True, embed_scale=32**0.5, attn_softcap=50.0,
    ),
    "basis-free norm, rotated residual": Config(
        n_ctx=16, d_model=32, n_layers=2, n_heads=4, d_mlp=64, norm="basisfree", rotation="independent"
    ),
}  # fmt: skip


def tokens(seed: int = 3) -> torch.Tensor:
    return torch.randint(0, 256, (8,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", FAMILIES)
def test_relevance_is_conserved_up_to_the_bias_term(name):
    model = random_model(FAMILIES[name])
    for target, foil in ((5, 9), (17, None)):
        relevances, terms = lrp.relevance(model, tokens(), target, foil)
        assert relevances.shape == (8,)
        assert terms["relative error"] < 1e-5, terms  # the score is read in float32
        if not model.cfg.bias:  # nothing but the input to explain the score with
            assert abs(terms["bias"]) < 1e-7, terms
        else:
            assert abs(terms["bias"]) > 1e-3, terms  # the biases do contribute here


def test_the_score_explained_is_the_models():
    model = random_model(FAMILIES["llama-like"])
    with torch.no_grad():
        logits = model(tokens()[None])[0, -1]
    _, terms = lrp.relevance(model, tokens(), 5, 9)
    assert terms["f(x)"] == pytest.approx((logits[5] - logits[9]).item(), abs=1e-6)


def test_without_nonlinearities_lrp_is_gradient_x_input():
    # attention whose scores are always 0 (a constant pattern), no norms, no MLPs: a linear model
    model = random_model(replace(ARCHITECTURES["attn-only"], positional="rotary"))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.W_Q.weight.zero_()
            block.attn.W_K.weight.zero_()
    for block in model.blocks:
        block.ln1 = torch.nn.Identity()
    model.ln_final = torch.nn.Identity()
    relevances, terms = lrp.relevance(model, tokens(), 5, 9)
    torch.testing.assert_close(relevances.double(), lrp.gradient_x_input(model, tokens(), 5, 9).double())
    assert terms["relative error"] < 1e-5


def test_a_missing_rule_breaks_conservation(monkeypatch):
    model = random_model(FAMILIES["llama-like"])
    hooks = lrp.Rules.hooks
    monkeypatch.setattr(
        lrp.Rules, "hooks", lambda self, mode: [h for h in hooks(self, mode) if "hook_scale" not in h[0]]
    )
    _, terms = lrp.relevance(model, tokens(), 5, 9)
    assert terms["relative error"] > 1e-3, terms


def test_a_model_whose_logits_are_soft_capped_is_refused():
    model = random_model(replace(FAMILIES["llama-like"], final_softcap=30.0))
    with pytest.raises(ValueError, match="final_softcap"):
        lrp.relevance(model, tokens(), 5, 9)


def test_deletion_curves_remove_positions_in_order_one_batch_per_step():
    seen = []

    def score(kept: torch.Tensor) -> torch.Tensor:
        seen.append(kept.tolist())
        return kept[:, 0].double()  # each prompt's first token, to tell the orders apart

    curves = lrp.deletion_curves(torch.tensor([10, 11, 12, 13]), [[2, 0], [3, 1]], score)
    assert seen == [[[10, 11, 12, 13]] * 2, [[10, 11, 13], [10, 11, 12]], [[11, 13], [10, 12]]]
    assert curves.tolist() == [[10.0, 10.0, 11.0], [10.0, 10.0, 10.0]]
    with pytest.raises(ValueError, match="as many positions"):
        lrp.deletion_curves(torch.tensor([10, 11, 12]), [[0], [0, 1]], score)
