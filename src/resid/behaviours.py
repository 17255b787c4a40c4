"""Prompt sets for the circuits chapters: indirect object identification, factual recall, and
what a model must get right before its circuits are worth finding."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from .model import Transformer

NAMES = [
    "Mary",
    "John",
    "Tom",
    "James",
    "Anna",
    "Paul",
    "Sarah",
    "David",
    "Emma",
    "Michael",
    "Lisa",
    "Mark",
    "Laura",
    "Peter",
    "Kate",
    "Daniel",
    "Alice",
    "Robert",
    "Jane",
    "Chris",
    "Susan",
    "George",
    "Helen",
    "Steve",
    "Linda",
    "Frank",
    "Maria",
    "Jack",
    "Rachel",
    "Adam",
    "Amy",
    "Bob",
    "Anne",
    "Ben",
    "Lucy",
    "Sam",
    "Julia",
    "Tim",
    "Karen",
    "Eric",
]
PLACES = [
    "store",
    "park",
    "school",
    "hospital",
    "station",
    "restaurant",
    "office",
    "market",
    "beach",
    "library",
]
OBJECTS = ["drink", "book", "ring", "bag", "letter", "gift", "ball", "key", "card", "cake"]
IOI_TEMPLATES = [
    "When {A} and {B} went to the {place}, {B} gave a {object} to",
    "After {A} and {B} went to the {place}, {B} gave a {object} to",
    "While {A} and {B} were at the {place}, {B} gave a {object} to",
    "When {A} and {B} arrived at the {place}, {B} handed a {object} to",
    "Then {A} and {B} walked to the {place}, and {B} gave a {object} to",
    "Once {A} and {B} got to the {place}, {B} passed a {object} to",
]
CAPITALS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Japan": "Tokyo",
    "Russia": "Moscow",
    "China": "Beijing",
    "Egypt": "Cairo",
    "Greece": "Athens",
    "Poland": "Warsaw",
    "Austria": "Vienna",
    "Portugal": "Lisbon",
    "Ireland": "Dublin",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Finland": "Helsinki",
    "Denmark": "Copenhagen",
    "Hungary": "Budapest",
    "Turkey": "Ankara",
    "Kenya": "Nairobi",
    "Peru": "Lima",
    "Cuba": "Havana",
    "Canada": "Ottawa",
    "Australia": "Canberra",
    "England": "London",
    "Thailand": "Bangkok",
    "Iran": "Tehran",
    "Iraq": "Baghdad",
    "Chile": "Santiago",
    "Belgium": "Brussels",
    "Argentina": "Buenos Aires",
    "Mexico": "Mexico City",
    "India": "New Delhi",
    "Scotland": "Edinburgh",
    "Wales": "Cardiff",
    "Ukraine": "Kyiv",
    "Romania": "Bucharest",
    "Bulgaria": "Sofia",
    "Serbia": "Belgrade",
    "Switzerland": "Bern",
    "Netherlands": "Amsterdam",
    "Vietnam": "Hanoi",
    "Indonesia": "Jakarta",
    "Philippines": "Manila",
    "Colombia": "Bogota",
    "Venezuela": "Caracas",
    "Nigeria": "Abuja",
    "Ethiopia": "Addis Ababa",
    "Morocco": "Rabat",
}


@dataclass
class ContrastSet:
    """Prompts of one token length with the answer and a foil token each, and their
    counterfactual twins (same length) whose answer is the foil."""

    text: list[str]
    tokens: Tensor  # [n, pos]
    answers: Tensor  # [n]
    foils: Tensor  # [n]
    counterfactual: Tensor  # [n, pos]

    def __len__(self) -> int:
        return len(self.text)


def single_token_words(tokenizer, words: list[str]) -> list[str]:
    """The words that are one token with a leading space (how they occur mid-sentence)."""
    return [w for w in words if len(tokenizer.encode(" " + w)) == 1]


def bos_prefix(tokenizer) -> list[int]:
    """The tokenizer's beginning-of-sequence token, if it has one, as a prefix. Models put an
    attention sink and their massive activations on the first token; a BOS token there keeps
    those off the words being studied."""
    bos = getattr(getattr(tokenizer, "hf", None), "bos_token_id", None)
    return [] if bos is None else [bos]


def ioi_prompts(tokenizer, n: int = 120, seed: int = 0) -> ContrastSet:
    """Indirect-object identification (Wang et al. 2023): "When Mary and John went to the store,
    John gave a drink to" -> " Mary" (the indirect object), foil " John" (the subject).

    The counterfactual swaps which name is repeated, so its answer is the other name. Names,
    places and objects are single tokens; the prompts are kept to the most common token length
    (the templates differ in length) so that they batch without padding. The two name orders
    (ABB, BAB) are balanced. Token ids start with the tokenizer's BOS token, if any.
    """
    names, places = single_token_words(tokenizer, NAMES), single_token_words(tokenizer, PLACES)
    objects = single_token_words(tokenizer, OBJECTS)
    rng = random.Random(seed)
    rows = []
    for i in range(n * 3):
        template = IOI_TEMPLATES[i % len(IOI_TEMPLATES)]
        io, subject = rng.sample(names, 2)
        first, second = (io, subject) if i % 2 == 0 else (subject, io)
        fill = {"place": rng.choice(places), "object": rng.choice(objects)}
        # after the comma the subject is named again; the counterfactual names the other one
        text = _repeat_name(template, first, second, subject, fill)
        counter = _repeat_name(template, first, second, io, fill)
        rows.append((text, counter, io, subject))
    bos = bos_prefix(tokenizer)
    encoded = [(bos + tokenizer.encode(t), bos + tokenizer.encode(c), a, f) for t, c, a, f in rows]
    lengths = [len(t) for t, c, _, _ in encoded if len(t) == len(c)]
    common = max(set(lengths), key=lengths.count)
    keep = [
        (r, e) for r, e in zip(rows, encoded, strict=True) if len(e[0]) == common and len(e[1]) == common
    ][:n]
    if len(keep) < n:
        raise ValueError(f"only {len(keep)} IOI prompts share a token length; ask for fewer")
    return ContrastSet(
        text=[r[0] for r, _ in keep],
        tokens=torch.tensor([e[0] for _, e in keep]),
        answers=torch.tensor([tokenizer.encode(" " + r[2])[0] for r, _ in keep]),
        foils=torch.tensor([tokenizer.encode(" " + r[3])[0] for r, _ in keep]),
        counterfactual=torch.tensor([e[1] for _, e in keep]),
    )


def _repeat_name(template: str, first: str, second: str, repeated: str, fill: dict) -> str:
    head, tail = template.split(", ", 1)
    return head.format(A=first, B=second, **fill) + ", " + tail.format(B=repeated, **fill)


def capital_prompts(tokenizer) -> tuple[list[str], Tensor, Tensor]:
    """ "The capital of France is" -> " Paris", for capitals that are one token: texts, ``[n, pos]``
    tokens (prompts of the most common length) and the answer ids."""
    rows = [
        (f"The capital of {country} is", " " + city)
        for country, city in CAPITALS.items()
        if len(tokenizer.encode(" " + city)) == 1
    ]
    encoded = [bos_prefix(tokenizer) + tokenizer.encode(text) for text, _ in rows]
    common = max({len(e) for e in encoded}, key=[len(e) for e in encoded].count)
    keep = [(r, e) for r, e in zip(rows, encoded, strict=True) if len(e) == common]
    return (
        [r[0] for r, _ in keep],
        torch.tensor([e for _, e in keep]),
        torch.tensor([tokenizer.encode(r[1])[0] for r, _ in keep]),
    )


@torch.no_grad()
def answer_accuracy(model: Transformer, tokens: Tensor, answers: Tensor, foils: Tensor | None = None) -> dict:
    """How well the model does the task: top-1 accuracy on the answer; with foils, how often
    the answer beats the foil and the mean logit difference."""
    logits = model(tokens)[:, -1].float()
    result = {"top-1 accuracy": (logits.argmax(-1) == answers).float().mean().item()}
    if foils is not None:
        diff = logits.gather(1, answers[:, None]) - logits.gather(1, foils[:, None])
        result |= {
            "answer beats foil": (diff > 0).float().mean().item(),
            "mean logit difference": diff.mean().item(),
        }
    return result
