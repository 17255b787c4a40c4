"""Head and neuron kinds of the Primer's catalogue, each recovered where it is planted: a pattern
that attends to the previous token scores on "previous" alone, a head whose OV circuit shifts
every token to the next one is a successor head, an OV circuit that negates erases, a neuron
whose output is minus its input removes what made it fire."""

from dataclasses import replace

import pytest
import torch
from test_circuits import random_model
from test_lrp import FAMILIES

from resid.model import Config, Transformer, readouts
from resid.tools import heads, neurons


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


@pytest.mark.parametrize("family", [name for name in FAMILIES if name.startswith(("llama", "gemma"))])
def test_eigenvalue_signs_from_the_small_product_match_the_whole_ov_circuit(family):
    model = random_model(FAMILIES[family])
    table = heads.ov_eigenvalue_signs(model)
    for _, row in table.iterrows():
        before, after = heads.norm_gains(model, int(row["layer"]))
        ov = model.OV(int(row["layer"]), int(row["head"])).double()
        ov = ov if before is None else before.double()[:, None] * ov
        ov = ov if after is None else ov * after.double()
        eigenvalues = torch.linalg.eigvals(ov)  # [d_model]: d_model - d_head of them zero
        whole = (eigenvalues.real.sum() / eigenvalues.abs().sum()).item()
        assert row["eigenvalue sign"] == pytest.approx(whole, abs=1e-6)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_few_tokens_direction_logits_are_those_columns_of_the_whole_vocabularys(family):
    """The unembedding's rows chosen before the product (what OV circuits and copy scores use)
    give the whole vocabulary's logits at those tokens, through each family's final norm."""
    model = random_model(FAMILIES[family])
    written = torch.randn(3, 5, model.cfg.d_model, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([7, 0, 3, 7])  # out of order and repeated
    whole = model.direction_logits(written)
    torch.testing.assert_close(model.direction_logits(written, ids), whole[..., ids], rtol=1e-6, atol=1e-6)
    assert model.direction_logits(written, ids).shape == (3, 5, 4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_direction_logit_spread_is_the_mean_and_std_of_the_whole_vocabularys_logits(family):
    """From the unembedding's moments, through each family's final norm (LayerNorm's centring
    included): what class scores standardise by, without the vocabulary's logits."""
    model = random_model(FAMILIES[family])
    written = torch.randn(3, 5, model.cfg.d_model, generator=torch.Generator().manual_seed(0))
    logits = model.direction_logits(written).double()  # [3, 5, vocab]
    mean, std = model.direction_logit_spread(written)
    assert mean.shape == std.shape == (3, 5)
    torch.testing.assert_close(mean.double(), logits.mean(-1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(std.double(), logits.std(-1), rtol=1e-5, atol=1e-6)


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


def test_a_syntactic_head_planted_scores_one_and_a_previous_token_head_below_zero():
    """Head 0's pattern is replaced so that the last query attends only to the related position
    (3); head 1's so that every query attends to the token before it."""
    torch.manual_seed(0)
    model = Transformer(Config(d_model=16, n_layers=1, n_heads=2, d_mlp=32, n_ctx=16)).eval()

    def plant(pattern: torch.Tensor, hook_point) -> torch.Tensor:  # [batch, head, query, key]
        n, planted = pattern.shape[-1], torch.zeros_like(pattern)
        planted[:, 0, :-1, 0] = 1.0
        planted[:, 0, -1, 3] = 1.0
        planted[:, 1, 0, 0] = 1.0
        planted[:, 1, torch.arange(1, n), torch.arange(n - 1)] = 1.0
        return planted

    sentences = [torch.arange(7), torch.arange(9)]  # lengths differ, as in agreement sentences
    related, first = torch.tensor([3, 3]), torch.tensor([1, 1])
    with model.hooks([("blocks.0.attn.hook_pattern", plant)]):
        scores = heads.relation_scores(model, sentences, related, first)  # [sentence, layer, head]
    assert scores.shape == (2, 1, 2)
    assert torch.allclose(scores[:, 0, 0], torch.ones(2))
    # keys 2 .. query - 1 other than 3; the previous token is one of them
    n_others = torch.tensor([len(s) - 4 for s in sentences], dtype=torch.float)
    assert torch.allclose(scores[:, 0, 1], -1 / n_others)
    with pytest.raises(ValueError, match="must lie between"):
        heads.relation_scores(model, sentences[:1], torch.tensor([6]), first[:1])


def test_last_position_outputs_average_each_heads_output_at_the_last_token_over_sentences():
    torch.manual_seed(0)
    model = Transformer(Config(d_model=16, n_layers=2, n_heads=2, d_mlp=32, n_ctx=16)).eval()
    sentences = [torch.randint(0, 256, (n,)) for n in (5, 8, 6)]
    means = heads.last_position_outputs(model, sentences, [1])
    name = "blocks.1.attn.hook_z"
    by_hand = torch.stack([model.run_with_cache(s[None], [name])[1][name][0, -1] for s in sentences]).mean(0)
    assert set(means) == {1} and torch.allclose(means[1], by_hand, atol=1e-6)


def test_last_position_logits_of_prompts_of_any_lengths_are_each_prompts_own_forward_pass():
    """Batched by length (three lengths, one of them twice), with and without an ablation: each row
    is what the prompt gives alone, and the answer's log-probability is its log-softmax entry."""
    from resid.model import hooks

    torch.manual_seed(0)
    model = Transformer(Config(d_model=16, n_layers=2, n_heads=2, d_mlp=32, n_ctx=16)).eval()
    prompts = [torch.randint(0, 256, (n,)) for n in (5, 8, 5, 6)]
    assert heads.rows_by_length(prompts) == [[0, 2], [1], [3]]
    answers = torch.tensor([3, 1, 4, 1])
    means = heads.last_position_outputs(model, prompts, [0, 1])
    for fwd_hooks in ((), hooks.replace_heads([(1, 0)], means, position=-1)):
        logits = heads.last_position_logits(model, prompts, fwd_hooks)
        alone = torch.stack([model.run_with_hooks(p[None], list(fwd_hooks))[0, -1] for p in prompts])
        assert logits.shape == (4, model.cfg.vocab_size) and torch.allclose(logits, alone, atol=1e-5)
        by_hand = torch.stack([alone[i].log_softmax(-1)[a] for i, a in enumerate(answers.tolist())])
        assert torch.allclose(heads.answer_log_probs(logits, answers), by_hand, atol=1e-5)
    ablated = heads.last_position_logits(model, prompts, hooks.replace_heads([(1, 0)], means, position=-1))
    assert not torch.allclose(ablated, heads.last_position_logits(model, prompts))  # the hooks are applied


def test_planted_ngram_detectors_are_found_on_one_text_and_confirmed_on_another():
    """Neuron 0 fires on token 5, neuron 1 on the bigram (3, 7), neuron 2 on any of tokens 1, 2
    and 9 (polysemantic), neuron 3 at random positions: the first three are n-gram detectors
    whose every firing on new text is at a trigger, the last is not."""
    g = torch.Generator().manual_seed(0)

    def text(n_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, 20, (n_windows, 40), generator=g)
        previous = torch.nn.functional.pad(tokens[:, :-1], (1, 0), value=-1)
        fires = torch.stack([tokens == 5, (previous == 3) & (tokens == 7),
                             torch.isin(tokens, torch.tensor([1, 2, 9])),
                             torch.rand(tokens.shape, generator=g) < 0.05], -1)  # fmt: skip
        return tokens, fires

    found = neurons.trigger_analysis(*text(60), *text(60), vocab_size=20)
    share = found["at_trigger"].sum(0) / found["firings"].sum(0)
    assert found["firings"].shape == (60, 4)
    assert torch.equal(share[:3], torch.ones(3)) and share[3] < 0.2
    assert found["confirmed_tokens"].tolist() == [1, 1, 3, 0]


def test_early_activations_equal_the_full_runs_neurons():
    torch.manual_seed(0)
    model = Transformer(Config(d_model=16, n_layers=3, n_heads=2, d_mlp=32, n_ctx=16)).eval()
    tokens = torch.randint(0, 256, (5, 12))
    _, cache = model.run_with_cache(tokens, ["blocks.1.mlp.hook_post"])
    early = neurons.early_activations(model, tokens, layer=1, batch_size=2)
    assert torch.allclose(early, cache["blocks.1.mlp.hook_post"], atol=1e-6)


def test_a_direct_path_that_copies_and_predicts_the_next_token_hits_its_bigrams_once_copying_is_set_aside():
    """Embedding the identity, unembedding 2 I (copying) plus a map of each token to its
    successor in the text: the direct path's top is the token itself, its second the follower.
    Without the successor map (copying alone) the direct path knows no bigram."""
    vocab = 8
    model = Transformer(Config(vocab_size=vocab, d_model=vocab, n_layers=1, n_heads=1, d_mlp=8, n_ctx=8,
                               norm="basisfree", tie_embeddings=False)).eval()  # fmt: skip
    follower = (torch.arange(vocab) + 3) % vocab  # token a is followed by follower[a]: one cycle
    ids = [0]
    for _ in range(200):
        ids.append(follower[ids[-1]].item())
    ids = torch.tensor(ids)
    successor = torch.zeros(vocab, vocab)
    successor[follower, torch.arange(vocab)] = 1.0  # the logit of follower[a] reads e_a
    with torch.no_grad():
        model.embed.weight.copy_(torch.eye(vocab))
        model.unembed.weight.copy_(2 * torch.eye(vocab) + successor)
        direct, baseline = heads.bigram_hits_without_copying(model, ids, torch.arange(vocab), chunk=3)
        assert direct.all() and baseline.float().mean() < 0.5
        model.unembed.weight.copy_(2 * torch.eye(vocab))
        copying, _ = heads.bigram_hits_without_copying(model, ids, torch.arange(vocab))
    assert copying.float().mean() < 0.5


def test_next_token_losses_average_to_the_models_loss():
    model = Transformer(Config(d_model=32, n_layers=2, n_heads=4, d_mlp=64, n_ctx=16)).eval()
    tokens = torch.randint(0, 256, (3, 10), generator=torch.Generator().manual_seed(0))
    losses = heads.next_token_losses(model, tokens)
    assert losses.shape == (3, 9)
    torch.testing.assert_close(losses.mean(), model.loss(tokens))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_losses_unembedded_a_few_positions_at_a_time_are_the_whole_passs_from_any_start(family, monkeypatch):
    """``next_token_losses`` takes the final residual and unembeds it in chunks (here of 5
    positions, across sequences' ends): the same losses as the cross-entropy of the whole pass's
    logits, with an ablation applied, and from ``start`` on only the later ones."""
    model = random_model(FAMILIES[family])
    if model.unembed is None:
        pytest.skip("an encoder without an LM head has no next-token loss")
    monkeypatch.setattr(readouts, "LOSS_CHUNK", 5)
    tokens = torch.randint(0, model.cfg.vocab_size, (3, 9), generator=torch.Generator().manual_seed(2))
    ablation = heads.mean_ablation(model, tokens.flip(0), ["L0H1", "L1H0"])
    logits = model.run_with_hooks(tokens, ablation)[:, :-1]
    whole = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    torch.testing.assert_close(heads.next_token_losses(model, tokens, ablation), whole)
    torch.testing.assert_close(heads.next_token_losses(model, tokens, ablation, start=4), whole[:, 4:])
    assert (heads.next_token_losses(model, tokens) - whole).abs().max() > 1e-4  # the ablation mattered


def test_each_sequences_head_scores_from_the_batch_are_its_own_passs():
    model = random_model(FAMILIES[sorted(FAMILIES)[0]])
    repeated = heads.repeated_tokens(4, 5, model.cfg.vocab_size, seed=3)
    by_sequence = heads.sequence_head_scores(model, repeated, 5)
    for i in range(len(repeated)):
        alone = heads.head_scores(model, repeated[[i]], 5)
        for kind in ("previous", "duplicate", "induction"):
            own = torch.tensor(alone[kind].to_numpy())
            torch.testing.assert_close(by_sequence[kind][i].flatten().double(), own)
    together = heads.head_scores(model, repeated, 5)
    mean = by_sequence["induction"].mean(0).flatten()
    torch.testing.assert_close(mean.double(), torch.tensor(together["induction"].to_numpy()))


def test_every_layers_means_from_one_pass_ablate_as_the_chosen_layers_own():
    """Heads passes ``output_means`` once for several ablated sets: the same losses as each set
    averaging its own layers, and a set's ablation changes the repeat's losses."""
    model = Transformer(Config(d_model=32, n_layers=3, n_heads=4, d_mlp=64, n_ctx=16)).eval()
    repeated = heads.repeated_tokens(4, 6, 256, seed=1)
    shared = heads.output_means(model, repeated)
    assert sorted(shared) == [0, 1, 2] and shared[1].shape == (4, 8)
    for chosen in (["L0H1", "L2H3"], [(1, 0)]):
        own = heads.ablated_in_context_losses(model, repeated, chosen, start=7)
        torch.testing.assert_close(heads.ablated_in_context_losses(model, repeated, chosen, 7, shared), own)
        intact = heads.in_context_losses(model, repeated, start=7, per_prompt=True)[1]
        assert (own - intact).abs().max() > 1e-4


def test_mean_ablation_over_one_sequence_leaves_that_sequence_unchanged():
    model = Transformer(Config(d_model=32, n_layers=2, n_heads=4, d_mlp=64, n_ctx=16)).eval()
    tokens = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(0))
    chosen = [(0, 1), "L1H3"]
    own = heads.mean_ablation(model, tokens[:1], chosen)  # the mean of one sequence is itself
    torch.testing.assert_close(heads.next_token_losses(model, tokens[:1], own),
                               heads.next_token_losses(model, tokens[:1]))  # fmt: skip
    other = heads.mean_ablation(model, tokens[1:], chosen)  # another sequence's outputs change it
    changed = heads.next_token_losses(model, tokens[:1], other) - heads.next_token_losses(model, tokens[:1])
    assert changed.abs().max() > 1e-4


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_logits_to_keep_gives_the_last_positions_of_the_whole_pass(family):
    """What the last-position tools ask for: the final norm and unembedding on the last
    positions alone, equal to the whole pass's logits there, with hooks and a cache as usual."""
    model = random_model(FAMILIES[family])
    if model.unembed is None:
        pytest.skip("an encoder without an LM head returns its final residual")
    tokens = torch.randint(0, model.cfg.vocab_size, (3, 7), generator=torch.Generator().manual_seed(1))
    whole = model(tokens)
    torch.testing.assert_close(model(tokens, logits_to_keep=1), whole[:, -1:], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(model(tokens, logits_to_keep=3), whole[:, -3:], rtol=1e-6, atol=1e-6)
    first = model.resid_names()[1]
    kept, cache = model.run_with_cache(tokens, [first], logits_to_keep=1)
    assert kept.shape == (3, 1, model.cfg.vocab_size) and cache[first].shape[:2] == (3, 7)
