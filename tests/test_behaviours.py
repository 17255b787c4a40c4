"""Prompt sets: a retrieval prompt and its counterfactual differ in the request alone, and the
answer is in the context."""

import re

from resid.tools import behaviours


class WordTokenizer:
    """A word (with its leading space) or a punctuation mark per token, ids assigned on first sight."""

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        return [self.vocab.setdefault(piece, len(self.vocab)) for piece in re.findall(r" ?\w+|[^\w\s]", text)]


def test_retrieval_prompts_ask_about_one_of_three_people_and_the_counterfactual_about_another():
    tokenizer = WordTokenizer()
    prompts = behaviours.retrieval_prompts(tokenizer, n=20, seed=0)
    assert prompts.tokens.shape == prompts.counterfactual.shape and len(prompts) == 20
    differs = prompts.tokens != prompts.counterfactual
    assert (differs.sum(1) == 1).all()
    rows = range(len(prompts))
    assert (
        prompts.tokens[rows, prompts.positions["request"]]
        != prompts.counterfactual[rows, prompts.positions["request"]]
    ).all()
    for row, answer, foil in zip(
        prompts.tokens.tolist(), prompts.answers.tolist(), prompts.foils.tolist(), strict=True
    ):
        context = row[: row.index(tokenizer.vocab[" Question"])]
        assert answer in context and foil in context and answer != foil  # both cities are told


def test_agreement_sentences_put_the_subject_where_they_say_and_the_verb_agrees_with_it():
    tokenizer = WordTokenizer()
    choose, measure = behaviours.agreement_splits(tokenizer, n=24, seed=0)
    assert len(choose) == len(measure) == 24
    pair_of = {word: i for i, pair in enumerate(behaviours.AGREEMENT_NOUNS) for word in pair}
    singular = {a for a, _ in behaviours.AGREEMENT_NOUNS}
    is_id, are_id = (tokenizer.vocab[v] for v in behaviours.AGREEMENT_VERBS)
    pairs_used = []
    for split in (choose, measure):
        used = set()
        for text, ids, subject, first, answer, foil in zip(
            split.text, split.tokens, split.subject.tolist(), split.first.tolist(), split.answers.tolist(),
            split.foils.tolist(), strict=True,
        ):  # fmt: skip
            subject_word, attractor_word = text.split()[1], text.split()[-1]
            assert ids[subject].item() == tokenizer.vocab[" " + subject_word]
            assert ids[first].item() == tokenizer.vocab["The"]
            assert (subject_word in singular) != (attractor_word in singular)  # one of each number
            assert (answer, foil) == ((is_id, are_id) if subject_word in singular else (are_id, is_id))
            used |= {pair_of[subject_word], pair_of[attractor_word]}
        pairs_used.append(used)
    assert not pairs_used[0] & pairs_used[1]  # the two splits share no noun
    assert len({len(ids) for ids in measure.tokens}) > 1  # the subject's distance from the end varies
