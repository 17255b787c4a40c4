"""Prompt sets: a retrieval prompt and its counterfactual differ in the request alone, and the
answer is in the context."""

import re

from resid import behaviours


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
