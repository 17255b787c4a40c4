import copy
import math

import pytest
import torch
import torch.nn.functional as F

from resid.model import Config, Transformer
from resid.model.data import ByteTokenizer
from resid.tools import plans, tasks

TOKENIZER = ByteTokenizer()


@pytest.fixture(scope="module")
def decoder():
    torch.manual_seed(0)
    model = Transformer(Config(d_model=32, n_layers=4, n_heads=4, d_mlp=64, n_ctx=512)).eval()
    model.tokenizer = TOKENIZER
    return model


def test_packed_task_targets_are_the_answers():
    items = [("1+2=", "3"), ("4+4=", "8"), ("10+5=", "15")]
    task = tasks.packed_task("add", tasks.STEPWISE, "", 0.1, [("0+0=", "0")], items, TOKENIZER, per_row=2)
    assert task.tokens.shape[0] == 2 and task.n_items == 3
    # Each target is the token that actually follows its prediction position.
    assert torch.equal(task.tokens[task.rows, task.positions + 1], task.targets)
    answers = ["".join(chr(t) for t in task.targets[task.group == k].tolist()) for k in range(3)]
    assert answers == ["3", "8", "15"]
    assert TOKENIZER.decode(task.tokens[0].tolist()).startswith("0+0=0\n1+2=3\n4+4=8\n")


def test_scores_of_each_kind():
    task = tasks.packed_task("t", tasks.STEPWISE, "", 0.1, [], [("a", "xy"), ("b", "z")], TOKENIZER)
    hits = torch.tensor([True, True, False])  # item 0 both tokens right, item 1 wrong
    assert task.score(torch.zeros(3), hits) == 0.5
    windows = torch.randint(0, 256, (2, 9))
    loss = tasks.perplexity_task(windows, 256)
    assert loss.score(torch.full((16,), -math.log(7.0)), torch.ones(16, dtype=torch.bool)) == pytest.approx(
        7.0
    )
    assert loss.normalised(256.0, 7.0) == pytest.approx(0.0) and loss.normalised(7.0, 7.0) == pytest.approx(
        1.0
    )


def test_choice_task_picks_the_most_likely_option():
    text = "\n\n".join(
        f"Sentence number {i} talks about a topic at some length and in quite some careful detail."
        for i in range(40)
    )
    task = tasks.continuation_task(text, TOKENIZER, n_items=5, n_options=3, context=10, continuation=4)
    assert task.n_items == 5 and task.tokens.shape == (15, 14)
    per_option = torch.zeros(15)
    per_option[::3] = 1.0  # the true option (first of each item) most likely
    logprob = per_option[task.group] - 5
    assert task.score(logprob, torch.ones_like(logprob, dtype=torch.bool)) == 1.0
    assert task.score(-logprob, torch.ones_like(logprob, dtype=torch.bool)) == 0.0


def test_word_recall_targets_occurred_earlier():
    text = "The kernel loads the module. " * 30
    windows = torch.tensor([TOKENIZER.encode(text)[:200]])
    with pytest.raises(ValueError, match="recall items"):
        tasks.word_recall_task(windows, TOKENIZER, n_items=5)  # bytes are never " word" tokens


def test_score_plans_matches_a_direct_computation(decoder):
    windows = torch.randint(0, 256, (3, 40), generator=torch.Generator().manual_seed(0))
    task = tasks.perplexity_task(windows, 256)
    items = [(f"{a}+{a}=", str(2 * a)) for a in range(12)]
    packed = tasks.packed_task("double", tasks.STEPWISE, "", 0.1, [], items, TOKENIZER, per_row=5)
    skip = plans.skip(4, 1, 2)
    scores = tasks.score_plans(decoder, [task, packed], [plans.identity(4), skip], batch_rows=2)
    with torch.no_grad():
        logits = decoder(windows)
        expected = F.cross_entropy(logits[:, :-1].reshape(-1, 256), windows[:, 1:].reshape(-1)).exp().item()
        assert scores[0]["perplexity"] == pytest.approx(expected, rel=1e-5)
        skipped = plans.run_plan(decoder, windows, skip)
        expected = F.cross_entropy(skipped[:, :-1].reshape(-1, 256), windows[:, 1:].reshape(-1)).exp().item()
        assert scores[1]["perplexity"] == pytest.approx(expected, rel=1e-5)
        hits = decoder(packed.tokens)[packed.rows, packed.positions].argmax(-1) == packed.targets
    assert scores[0]["double"] == pytest.approx(packed.score(torch.zeros(len(hits)), hits))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_score_plans_gives_each_task_kind_what_a_full_forward_pass_gives(decoder, dtype):
    """The readout computes only what each target's task scores (a hit or a log-probability),
    in float32 and in bfloat16 (the painters chapter's default, where ties in the argmax occur)."""
    decoder = copy.deepcopy(decoder).to(dtype)
    examples = [(f"{a}*2=", str(2 * a)) for a in (11, 12, 13)]
    items = [(f"{a}*2=", str(2 * a)) for a in range(20)]
    packed = tasks.packed_task("double", tasks.STEPWISE, "", 0.1, examples, items, TOKENIZER, per_row=4)
    text = "\n\n".join(
        f"Sentence number {i} talks about a topic at some length and in quite some careful detail."
        for i in range(40)
    )
    choice = tasks.continuation_task(text, TOKENIZER, n_items=5, n_options=3, context=10, continuation=4)
    variants = [plans.identity(4), plans.skip(4, 1, 2), plans.parallel(4, 1, 2, loops=2)]
    values = tasks.score_plans(decoder, [packed, choice], variants, batch_rows=4, per_item=True)
    for plan, value in zip(variants, values, strict=True):
        for task in (packed, choice):
            logits = plans.run_plan(decoder, task.tokens, plan)[task.rows, task.positions]
            logprob = F.log_softmax(logits.float(), -1).gather(-1, task.targets[:, None]).squeeze(-1)
            expected = task.item_values(logprob, logits.argmax(-1) == task.targets)
            assert torch.equal(value[task.name], expected)


def test_item_values_bootstrap_into_paired_scores(decoder):
    windows = torch.randint(0, 256, (4, 40), generator=torch.Generator().manual_seed(1))
    loss = tasks.perplexity_task(windows, 256)
    items = [(f"{a}+{a}=", str(2 * a)) for a in range(12)]
    packed = tasks.packed_task("double", tasks.STEPWISE, "", 0.1, [], items, TOKENIZER, per_row=5)
    variants = [plans.identity(4), plans.skip(4, 1, 2)]
    scores = tasks.score_plans(decoder, [loss, packed], variants, batch_rows=2)
    values = tasks.score_plans(decoder, [loss, packed], variants, batch_rows=2, per_item=True)
    assert values[0]["perplexity"].shape == (4,) and values[0]["double"].shape == (12,)
    for score, value in zip(
        scores, values, strict=True
    ):  # equal-length windows: row means average to the token mean
        assert loss.score_items(value["perplexity"]) == pytest.approx(score["perplexity"], rel=1e-9)
        assert packed.score_items(value["double"]) == pytest.approx(score["double"])
    resampled = tasks.resampled_scores([loss, packed], values, n_resamples=50, seed=3)
    assert resampled["perplexity"].shape == (51, 2)
    assert resampled["perplexity"][0, 1].item() == pytest.approx(scores[1]["perplexity"], rel=1e-9)
    # paired: a plan compared with itself differs by exactly nothing in every resample
    same = tasks.resampled_scores([loss], [values[1], values[1]], n_resamples=50)["perplexity"]
    assert torch.equal(same[:, 0], same[:, 1]) and same[1:, 0].std() > 0


def test_stepwise_items_have_correct_answers():
    items = tasks.stepwise_items(20, seed=1)
    for prompt, answer in items["count on"][2]:
        first, second, third = (int(x) for x in prompt.rstrip(",").split(", "))
        assert second - first == third - second == 2 and int(answer) == third + 2
    for prompt, answer in items["addition"][2]:
        a, b = prompt.rstrip("=").split("+")
        assert int(answer) == int(a) + int(b)
    for prompt, answer in items["reverse list"][2]:
        assert answer.split() == prompt.removesuffix(" ->").split()[::-1]
    for prompt, answer in items["counting"][2]:
        assert int(answer) == prompt.count("x")


def test_encoder_plans_respect_the_attention_mask():
    torch.manual_seed(0)
    cfg = Config(d_model=32, n_layers=4, n_heads=4, d_mlp=64, n_ctx=64, causal=False, post_norm=True,
                 embed_norm=True, bias=True, lm_head=False, tie_embeddings=False)  # fmt: skip
    encoder = Transformer(cfg).eval()

    class Batcher:  # a byte tokenizer that pads, like HFTokenizer.batch
        def batch(self, texts):
            ids = [list(t.encode()) for t in texts]
            length = max(map(len, ids))
            tokens = torch.tensor([i + [0] * (length - len(i)) for i in ids])
            mask = torch.tensor([[1] * len(i) + [0] * (length - len(i)) for i in ids])
            return tokens, mask

    encoder.tokenizer = Batcher()
    variants = [plans.identity(4), plans.parallel(4, 1, 2, loops=2), plans.reverse(4, 1, 2)]
    short = "a short one"
    together = tasks.embed_under_plans(encoder, [short, "a much longer sentence than the first"], variants)
    alone = tasks.embed_under_plans(encoder, [short], variants)
    for a, b in zip(together, alone, strict=True):
        torch.testing.assert_close(a[:1], b, rtol=1e-5, atol=1e-5)


class Request:
    def __init__(self, *args):
        self.args = args


def test_lm_eval_adapter_scores_agree_with_the_model(decoder):
    from resid.tools.lm_eval_adapter import PlanLM

    lm = PlanLM(decoder, plans.reverse(4, 1, 2))
    context, continuation = "abc", "de"
    ((total, greedy),) = lm.loglikelihood([Request(context, continuation)])
    ids = torch.tensor([list(b"abcde")])
    logprobs = F.log_softmax(plans.run_plan(decoder, ids, lm.plan)[0], -1)
    expected = (logprobs[2, ord("d")] + logprobs[3, ord("e")]).item()
    assert total == pytest.approx(expected, abs=1e-4)
    assert greedy == bool(logprobs[2].argmax() == ord("d") and logprobs[3].argmax() == ord("e"))
    (rolling,) = lm.loglikelihood_rolling([Request("abcde")])
    assert rolling == pytest.approx(
        expected + logprobs[0, ord("b")].item() + logprobs[1, ord("c")].item(), abs=1e-4
    )
    (text,) = lm.generate_until([Request("abc", {"until": ["\n"], "max_gen_toks": 5})])
    assert len(text) <= 5 and "\n" not in text


class WordTokenizer:
    """Words (with their leading space) as tokens; a word of more than six letters is two."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def _id(self, piece: str) -> int:
        return self.vocab.setdefault(piece, len(self.vocab) + 1)  # 0 pads

    def encode(self, text: str) -> list[int]:
        import re

        pieces = []
        for piece in re.findall(r" ?[^ \n]+|\n| ", text):
            word = piece.lstrip(" ")
            pieces += [piece[: len(piece) - len(word) + 6], word[6:]] if len(word) > 6 else [piece]
        return [self._id(p) for p in pieces]

    def decode(self, ids: list[int]) -> str:
        names = {i: p for p, i in self.vocab.items()}
        return "".join(names.get(i, "") for i in ids)


def test_a_knowledge_task_asks_for_one_token_words_in_the_packed_format():
    tokenizer = WordTokenizer()
    pairs = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Japan", "Tokyo"),
             ("Greece", "Athens"), ("Peru", "Lima"), ("Cuba", "Havana"), ("Germany", "Berlin")]  # fmt: skip
    task = tasks.knowledge_task("capital", pairs, tokenizer, seed=1, prefix=[999])
    # "Germany" is two tokens here: that pair is left out; three of the seven are the examples
    assert task.family == tasks.SEMANTIC and task.kind == "exact" and task.n_items == 4
    assert task.chance == pytest.approx(1 / 4) and bool((task.tokens[:, 0] == 999).all())
    assert torch.equal(task.tokens[task.rows, task.positions + 1], task.targets)
    answers = {tokenizer.decode([t]) for t in task.targets.tolist()}
    assert answers <= {" " + y for _, y in pairs[:7]} and len(answers) == 4
    text = tokenizer.decode(task.tokens[0].tolist())
    assert text.count(" ->") == 7 and "Berlin" not in text
    with pytest.raises(ValueError, match="one-token words"):
        tasks.knowledge_task("capital", pairs[:4], tokenizer)


def test_the_one_format_suite_scores_every_accuracy_task_by_exact_match(monkeypatch):
    tokenizer = WordTokenizer()
    prose = " ".join(["The kernel loads the module and the module calls the kernel again."] * 6)
    text = "\n\n".join(f"Paragraph {i} says: {prose}" for i in range(40))
    monkeypatch.setattr(tasks.data, "corpus", lambda name: text)
    model = Transformer(Config(vocab_size=2000, d_model=16, n_layers=2, n_heads=2, d_mlp=32, n_ctx=512))
    model.tokenizer = tokenizer
    antonyms = [
        ("hot", "cold"),
        ("big", "small"),
        ("up", "down"),
        ("good", "bad"),
        ("fast", "slow"),
        ("high", "low"),
    ]
    knowledge = {"antonym": antonyms}
    suite = tasks.one_format_suite(model, knowledge, n_items=5, n_windows=4, seed=0, skip_windows=2)
    kinds = {t.name: t.kind for t in suite}
    assert kinds.pop("perplexity") == "loss" and kinds.pop("true continuation") == "choice"
    assert set(kinds.values()) == {"exact"} and "antonym" in kinds and "word recall" in kinds
    families = {t.family for t in suite if t.kind == "exact"}
    assert families == {tasks.SEMANTIC, tasks.STEPWISE}
    first = tasks.one_format_suite(model, knowledge, n_items=5, n_windows=2, seed=0)
    assert not any(torch.equal(a, b) for a in first[0].tokens for b in suite[0].tokens)  # new windows
    other_items = tasks.one_format_suite(model, knowledge, n_items=5, n_windows=2, seed=1, windows_seed=0)
    assert torch.equal(other_items[0].tokens, first[0].tokens)  # the same windows, new generated items
    assert not torch.equal(other_items[-1].tokens, first[-1].tokens)


def test_the_loop_grid_grows_until_the_best_count_is_inside(monkeypatch):
    best_at = {4: 5, 2: 2}  # M -> the planted best loop count

    def planted(model, task_list, plan_list, batch_rows=64, per_item=False):
        out = []
        for plan in plan_list:
            step = next(s for s in plan if len(s.layers) > 1)
            m, k = len(step.layers), step.loops
            out.append({"perplexity": torch.full((3,), -abs(k - best_at[m]) - 1.0, dtype=torch.float64)})
        return out

    monkeypatch.setattr(tasks, "score_plans", planted)
    task = tasks.perplexity_task(torch.zeros(3, 5, dtype=torch.long), 10)
    keys, values = tasks.grown_loop_sweep(None, task, n_layers=8, n_grid=[2, 3], loops=4, limit=16)
    assert sorted({k for _, k in keys}) == list(range(1, 9)) and len(keys) == len(values) == 16
    assert keys == sorted(keys) and {m for m, _ in keys} == {2, 4}
    ppl = {key: task.score_items(v["perplexity"]) for key, v in zip(keys, values, strict=True)}
    assert min(range(1, 9), key=lambda k: ppl[(4, k)]) == 5
    keys, _ = tasks.grown_loop_sweep(None, task, n_layers=8, n_grid=[2, 3], loops=4, limit=4)
    assert max(k for _, k in keys) == 4  # the limit stops it, the best on the edge


def test_a_resampled_mean_carries_the_spread_between_draws():
    from resid import stats

    alike = torch.ones(201, 4)
    assert torch.equal(stats.resampled_mean(alike), torch.ones(201, dtype=torch.float64))
    draws = torch.tensor([0.0, 1.0, 2.0, 3.0]).expand(201, 4)  # every item agrees, the draws do not
    means = stats.resampled_mean(draws, seed=0)
    assert means[0] == 1.5 and means[1:].std() > 0.2 and set(means[1:].tolist()) <= {x / 4 for x in range(13)}
