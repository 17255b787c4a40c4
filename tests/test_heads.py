"""Head and neuron kinds of the Primer's catalogue, each recovered where it is planted: a pattern
that attends to the previous token scores on "previous" alone, a head whose OV circuit shifts
every token to the next one is a successor head, an OV circuit that negates erases, a neuron
whose output is minus its input removes what made it fire."""

from dataclasses import replace

import pytest
import torch

from resid import heads, neurons
from resid.model import Config, Transformer


def patterns_attending(offset: int, n: int = 6) -> torch.Tensor:
    """[layer 1, batch 2, head 1, query, key]: every query on the key ``offset`` back (itself for
    0; position 0 where that key does not exist)."""
    pattern = torch.zeros(n, n)
    for q in range(n):
        pattern[q, max(q - offset, 0)] = 1.0
    return pattern.expand(1, 2, 1, n, n).clone()


def test_each_positional_kind_is_recovered_from_a_planted_pattern_and_only_it():
    for offset, kind in ((0, "self"), (1, "previous")):
        scores = heads.positional_scores(patterns_attending(offset))
        assert scores[kind].item() == 1.0
        assert all(scores[other].item() == 0.0 for other in scores if other != kind)
    sink = torch.zeros(1, 2, 1, 6, 6)
    sink[..., 0] = 1.0
    assert heads.positional_scores(sink)["first"].item() == 1.0


class PieceTokenizer:
    """Token i decodes to PIECES[i]."""

    PIECES = [" the", " un", "believ", "able", " cat", ".", " sat"]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.PIECES[i] for i in ids)


def test_word_starts_join_pieces_of_one_word_and_a_joiner_head_scores_one():
    tokens = torch.tensor([[0, 1, 2, 3, 4, 5, 6]])
    starts = heads.word_starts(PieceTokenizer(), tokens)
    assert starts.tolist() == [[True, True, False, False, True, True, True]]
    joiner = torch.zeros(1, 1, 1, 7, 7)  # "believ" and "able" attend to " un"
    for q in range(7):
        joiner[0, 0, 0, q, 1 if q in (2, 3) else q] = 1.0
    previous = patterns_attending(1, 7)[:, :1]  # "able" puts its weight on "believ": also the same word
    scores = heads.subword_joiner_scores(torch.cat([joiner, previous]), starts)
    assert scores[0, 0].item() == 1.0 and scores[1, 0].item() == 1.0
    index = heads.joiner_index(torch.cat([joiner, previous]), starts)
    assert index[0, 0].item() == 1.0 and index[1, 0].item() == 0.0  # the previous-token head: a side effect
    self_attending = patterns_attending(0, 7)[:, :1]
    assert heads.subword_joiner_scores(self_attending, starts).item() == 0.0
    with pytest.raises(ValueError, match="no token continues a word"):
        heads.subword_joiner_scores(self_attending, torch.ones(1, 7, dtype=torch.bool))


def planted_model(ov: torch.Tensor) -> Transformer:
    """One head whose OV circuit is ``ov``, one-hot embeddings tied to the unembedding, so that
    the head's full OV circuit on the tokens is ``ov`` up to a positive scale."""
    d = ov.shape[0]
    cfg = Config(d_model=d, n_layers=1, n_heads=1, d_mlp=4, n_ctx=8, vocab_size=d, norm="basisfree")
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.embed.weight.copy_(torch.eye(d))
        model.blocks[0].attn.W_V.weight.copy_(torch.eye(d))
        model.blocks[0].attn.W_O.weight.copy_(ov.T)
    return model


def test_a_head_that_shifts_each_token_to_the_next_is_a_successor_head_and_a_copying_one_is_not():
    shift = torch.roll(torch.eye(8), 1, dims=1)  # row i -> column i + 1
    days, numbers = torch.arange(0, 4), torch.arange(4, 8)
    assert heads.successor_scores(planted_model(shift), [days, numbers])["successor"].item() == 1.0
    assert heads.successor_scores(planted_model(torch.eye(8)), [days, numbers])["successor"].item() == 0.0


def test_the_eigenvalue_sign_of_an_ov_circuit_tells_copying_from_erasing():
    projection = torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert heads.ov_eigenvalue_signs(planted_model(projection))["eigenvalue sign"].item() == pytest.approx(
        1.0
    )
    assert heads.ov_eigenvalue_signs(planted_model(-projection))["eigenvalue sign"].item() == pytest.approx(
        -1.0
    )
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]])  # eigenvalues ±i: neither
    assert heads.ov_eigenvalue_signs(planted_model(rotation))["eigenvalue sign"].item() == pytest.approx(0.0)


def test_a_neuron_that_writes_minus_what_it_reads_has_cosine_minus_one():
    torch.manual_seed(0)
    model = Transformer(Config(d_model=16, n_layers=1, n_heads=2, d_mlp=8, n_ctx=8, norm="basisfree")).eval()
    mlp = model.blocks[0].mlp
    with torch.no_grad():
        mlp.W_out.weight[:, 0] = -2.0 * mlp.W_in.weight[0]  # neuron 0 erases its own input direction
        mlp.W_out.weight[:, 1] = 3.0 * mlp.W_in.weight[1]  # neuron 1 amplifies it
    cosines = neurons.in_out_cosines(model, 0)
    assert cosines.shape == (8,)
    assert cosines[0].item() == pytest.approx(-1.0, abs=1e-6) and cosines[1].item() == pytest.approx(
        1.0, abs=1e-6
    )
    assert cosines[2:].abs().max() < 0.9  # random directions in 16 dimensions


def test_in_a_gated_mlp_the_input_direction_is_the_gates():
    torch.manual_seed(0)
    cfg = Config(d_model=16, n_layers=1, n_heads=2, d_mlp=8, n_ctx=8, norm="basisfree", mlp="swiglu")
    model = Transformer(cfg).eval()
    mlp = model.blocks[0].mlp
    with torch.no_grad():
        mlp.W_out.weight[:, 0] = -mlp.W_gate.weight[0]
    assert neurons.in_out_cosines(model, 0)[0].item() == pytest.approx(-1.0, abs=1e-6)


def test_a_norm_gain_that_flips_a_coordinate_flips_the_eigenvalue_sign_the_residual_sees():
    """The OV circuit acts on the normalised stream: a negative input gain on every coordinate
    turns a copying head, as the residual sees it, into an erasing one, and a sandwich norm's
    output gain counts the same way."""
    identity = torch.eye(4)
    for norm, attribute in (("rmsnorm", "ln1"), ("rmsnorm", "ln1_post")):
        model = planted_model(identity)
        if attribute == "ln1_post":
            model = Transformer(replace(model.cfg, norm=norm, sandwich_norms=True)).eval()
        else:
            model = Transformer(replace(model.cfg, norm=norm)).eval()
        with torch.no_grad():
            model.embed.weight.copy_(torch.eye(4))
            model.blocks[0].attn.W_V.weight.copy_(identity)
            model.blocks[0].attn.W_O.weight.copy_(identity)
        assert heads.ov_eigenvalue_signs(model)["eigenvalue sign"].item() == pytest.approx(1.0)
        with torch.no_grad():
            getattr(model.blocks[0], attribute).weight.fill_(-2.0)
        assert heads.ov_eigenvalue_signs(model)["eigenvalue sign"].item() == pytest.approx(-1.0)
        assert heads.copy_scores(model, torch.arange(4))["copying"].item() == 0.0  # it writes minus the token


def test_a_neuron_whose_output_norm_gain_is_negative_erases_what_it_amplified():
    torch.manual_seed(0)
    cfg = Config(d_model=16, n_layers=1, n_heads=2, d_mlp=8, n_ctx=8, norm="rmsnorm", sandwich_norms=True)
    model = Transformer(cfg).eval()
    mlp = model.blocks[0].mlp
    with torch.no_grad():
        mlp.W_out.weight[:, 0] = mlp.W_in.weight[0]
    assert neurons.in_out_cosines(model, 0)[0].item() == pytest.approx(1.0, abs=1e-6)
    with torch.no_grad():
        model.blocks[0].ln2_post.weight.fill_(-1.0)
    assert neurons.in_out_cosines(model, 0)[0].item() == pytest.approx(-1.0, abs=1e-6)


def test_a_neuron_that_fires_on_a_range_of_positions_is_explained_by_position_and_noise_is_not():
    generator = torch.Generator().manual_seed(0)
    windows, positions = 64, 64
    noise = torch.randn(windows, positions, 2, generator=generator)
    acts = noise.clone()
    acts[:, 20:40, 0] += 10.0  # neuron 0 fires on positions 20-39
    shares = neurons.position_shares(acts)
    assert shares[0] > 0.9
    chance = (positions - 2 - 1) / ((positions - 2) * windows - 1)
    assert shares[1] < 3 * chance
    constant = torch.ones(windows, positions, 1)
    assert neurons.position_shares(constant).item() == 0.0  # no variance: nothing to explain


def test_a_neuron_that_writes_a_tokens_unembedding_promotes_that_token_most():
    torch.manual_seed(0)
    cfg = Config(d_model=16, n_layers=1, n_heads=2, d_mlp=8, n_ctx=8, vocab_size=30, norm="basisfree")
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.blocks[0].mlp.W_out.weight[:, 3] = 5 * model.unembed.weight[7]  # neuron 3 writes token 7
        model.blocks[0].mlp.W_out.weight[:, 4] = -5 * model.unembed.weight[7]  # neuron 4 suppresses it
    z = neurons.standardised_value_logits(model, 0, torch.arange(30))  # [neuron, token]
    assert z[3].argmax().item() == 7 and z[4].argmin().item() == 7 and z[3, 7] > 3
    assert torch.allclose(neurons.class_promotion(model, 0, torch.tensor([7, 8])), z[:, [7, 8]].mean(1))
