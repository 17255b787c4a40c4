"""Function vectors: the heads' writes add up to the attention's output, the indirect effect is
exactly what patching one head's last-position output does, and the prompts are well formed."""

import torch

from resid.model import Config, Transformer, hooks
from resid.model.cache import act_name
from resid.stats.metrics import AnswerProbability
from resid.tools import function_vectors as fv


def tiny(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = Config(
        d_model=16, n_layers=2, n_heads=2, d_mlp=32, n_ctx=32, vocab_size=40, norm="rmsnorm", **overrides
    )
    return Transformer(cfg).eval()


def test_the_heads_writes_add_up_to_the_attention_output_also_through_a_sandwich_norm():
    tokens = torch.randint(0, 40, (3, 9))
    for model in (tiny(), tiny(sandwich_norms=True)):
        if getattr(model.blocks[0], "ln1_post", None) is not None:
            with torch.no_grad():  # gains other than one, so that folding them matters
                for block in model.blocks:
                    block.ln1_post.weight.uniform_(-2, 2)
        writes = fv.head_writes(model, tokens)  # [batch, layer, head, d_model]
        names = [f"blocks.{i}.hook_attn_out" for i in range(2)]
        _, cache = model.run_with_cache(tokens, names)
        for layer, name in enumerate(names):
            torch.testing.assert_close(writes[:, layer].sum(1), cache[name][:, -1], atol=1e-5, rtol=1e-4)


def test_the_indirect_effect_is_the_patch_of_one_heads_last_output_and_zero_for_its_own_values():
    model = tiny()
    corrupted, answers = torch.randint(0, 40, (4, 7)), torch.randint(0, 40, (4,))
    mean_z = [torch.randn(2, 8) for _ in range(2)]
    effects = fv.average_indirect_effect(model, corrupted, answers, mean_z)
    probability = AnswerProbability(answers)
    _, cache = model.run_with_cache(corrupted, [act_name("z", i) for i in range(2)])
    base = probability(model(corrupted)[:, -1]).mean()
    for layer, head in ((0, 1), (1, 0)):
        source = cache[act_name("z", layer)].clone()
        source[:, -1] = mean_z[layer]
        patched = model.run_with_hooks(corrupted, hooks.replace_heads([(layer, head)], {layer: source}))
        expected = probability(patched[:, -1]).mean() - base
        assert abs(effects[layer, head].item() - expected.item()) < 1e-5
    one = corrupted[:1]
    own = fv.mean_head_z(model, one)  # the mean over one prompt: its own values
    assert fv.average_indirect_effect(model, one, answers[:1], own).abs().max() < 1e-6


def test_adding_a_vector_changes_only_its_position_and_zero_changes_nothing():
    model = tiny()
    tokens = torch.randint(0, 40, (2, 6))
    clean = model(tokens)
    assert torch.equal(model.run_with_hooks(tokens, fv.add_at(1, torch.zeros(16))), clean)
    moved = model.run_with_hooks(tokens, fv.add_at(1, 5 * torch.ones(16)))
    torch.testing.assert_close(moved[:, :-1], clean[:, :-1])  # causal: earlier positions cannot see it
    assert (moved[:, -1] - clean[:, -1]).abs().max() > 1e-3


class WordTokenizer:
    """One token per word; "Q:", "\\nA:" and "\\n\\n" are tokens 0, 1, 2."""

    def encode(self, text: str) -> list[int]:
        return {"Q:": [0], "\nA:": [1], "\n\n": [2]}.get(text) or [int(text)]


def test_prompts_have_one_length_never_show_the_query_and_shuffling_keeps_the_outputs():
    pairs = [(10 + i, 50 + i) for i in range(12)]
    tokens, answers = fv.icl_prompts(WordTokenizer(), pairs, pairs[:4], n_shots=5, prefix=[99])
    assert tokens.shape == (4, 1 + 5 * 5 + 3) and answers.tolist() == [50, 51, 52, 53]
    for row, (x, _) in zip(tokens.tolist(), pairs[:4], strict=True):
        shown = row[2:-3:5]
        assert x not in shown and row[-2] == x and row[0] == 99
        assert [row[i + 2] for i in range(2, len(row) - 3, 5)] == [50 + s - 10 for s in shown]  # y after x
    shuffled, _ = fv.icl_prompts(
        WordTokenizer(), pairs, pairs[:4], n_shots=5, prefix=[99], shuffle_labels=True
    )
    for clean_row, corrupt_row in zip(tokens.tolist(), shuffled.tolist(), strict=True):
        assert clean_row[2::5] == corrupt_row[2::5]  # the same inputs in the same order
        assert sorted(clean_row[4:-3:5]) == sorted(corrupt_row[4:-3:5])  # their outputs permuted
    zero, _ = fv.icl_prompts(WordTokenizer(), pairs, pairs[:2], n_shots=0)
    assert zero.tolist() == [[0, 10, 1], [0, 11, 1]]


def test_the_next_item_task_holds_the_63_consecutive_pairs_its_criteria_name():
    pairs = fv.NEXT_ITEM
    assert len(pairs) == len(set(pairs)) == 63
    assert ("nineteen", "twenty") in pairs and ("Sunday", "Monday") in pairs
    assert ("December", "January") in pairs and ("y", "z") in pairs and ("z", "a") not in pairs
    # no pair belongs to the four pooled tasks, whose claims keep their items
    assert not set(pairs) & {pair for task in fv.FV_TASKS.values() for pair in task}


def test_zero_shot_hits_a_zero_vector_changes_nothing_and_a_planted_answer_direction_wins():
    model = tiny()
    tokens = torch.randint(3, 40, (6, 5))
    answers = torch.full((6,), 7)
    none = fv.zero_shot_hits(model, tokens, answers, 1, torch.zeros(16), n_random=2)
    assert torch.equal(none["vector"], none["plain"]) and torch.equal(none["random"], none["plain"])
    unembedding = model.unembed.weight[7]  # [d_model]
    planted = 1e4 * unembedding / unembedding.norm()  # the answer's own unembedding direction
    hits = fv.zero_shot_hits(model, tokens, answers, 1, planted, generator=torch.Generator().manual_seed(0))
    assert hits["vector"].tolist() == [1.0] * 6 and hits["plain"].mean() < 1
    assert hits["random"].mean() < 1  # a random direction of that norm does not pick token 7
