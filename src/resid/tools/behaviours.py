"""Prompt sets for the circuits chapters: indirect object identification, factual recall, and
what a model must get right before its circuits are worth finding."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from torch import Tensor

from resid.model import Transformer
from resid.stats.metrics import LogitDiff

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
# The circuit section's wider set: five of the six above (not "Then ..., and", a token longer)
# and twelve more of the same shape and, with SmolLM2's tokenizer, the same token length, so
# that prompts batch without padding and a circuit can be tested on templates it was not found on.
IOI_TEMPLATES_EXTENDED = (
    IOI_TEMPLATES[:4]
    + IOI_TEMPLATES[5:]
    + [
        "As {A} and {B} were leaving the {place}, {B} threw a {object} to",
        "Before {A} and {B} left for the {place}, {B} sent a {object} to",
        "When {A} and {B} met at the {place}, {B} showed a {object} to",
        "After {A} and {B} talked at the {place}, {B} sold a {object} to",
        "Since {A} and {B} were at the {place}, {B} brought a {object} to",
        "When {A} and {B} stopped at the {place}, {B} lent a {object} to",
        "After {A} and {B} arrived at the {place}, {B} offered a {object} to",
        "When {A} and {B} were in the {place}, {B} gave a {object} to",
        "After {A} and {B} argued at the {place}, {B} returned the {object} to",
        "When {A} and {B} came to the {place}, {B} handed a {object} to",
        "While {A} and {B} sat in the {place}, {B} passed a {object} to",
        "After {A} and {B} ate at the {place}, {B} gave a {object} to",
    ]
)
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
class PromptSet:
    """Prompts of one token length, each with the token that answers it."""

    text: list[str]
    tokens: Tensor  # [n, pos]
    answers: Tensor  # [n]

    def __len__(self) -> int:
        return len(self.text)


@dataclass
class ContrastSet(PromptSet):
    """Prompts of one token length with the answer and a foil token each, and their
    counterfactual twins (same length) whose answer is the foil.

    ``corruptions`` holds further counterfactual sets of the same shape (for IOI, ``"abc"``:
    three distinct names, which carry no IOI signal at all); ``positions`` names token
    positions per prompt (for IOI: ``"IO"``, ``"S1"``, ``"S1+1"``, ``"S2"``, ``"end"``);
    ``group`` says which template each prompt came from.
    """

    foils: Tensor  # [n]
    counterfactual: Tensor  # [n, pos]
    corruptions: dict[str, Tensor] = field(default_factory=dict)  # name -> [n, pos]
    positions: dict[str, Tensor] = field(default_factory=dict)  # name -> [n]
    group: Tensor | None = None  # [n]

    def subset(self, index: Tensor) -> ContrastSet:
        """The prompts at ``index`` (a tensor of indices), every field cut alike."""
        return ContrastSet(
            text=[self.text[i] for i in index.tolist()],
            tokens=self.tokens[index],
            answers=self.answers[index],
            foils=self.foils[index],
            counterfactual=self.counterfactual[index],
            corruptions={k: v[index] for k, v in self.corruptions.items()},
            positions={k: v[index] for k, v in self.positions.items()},
            group=None if self.group is None else self.group[index],
        )

    def split(
        self, held_out: float = 0.5, seed: int = 0, by_group: bool = False
    ) -> tuple[ContrastSet, ContrastSet]:
        """A discovery set and a held-out set. ``by_group`` holds out whole templates, so that
        what was found on some sentences is tested on sentences it never saw."""
        if not 0 < held_out < 1:
            raise ValueError(f"held_out={held_out}; choose a fraction between 0 and 1")
        generator = torch.Generator().manual_seed(seed)
        if by_group:
            if self.group is None:
                raise ValueError("this prompt set has no groups to split by")
            groups = self.group.unique()
            shuffled = groups[torch.randperm(len(groups), generator=generator)]
            n_out = max(1, round(held_out * len(groups)))
            is_out = torch.isin(self.group, shuffled[:n_out])
        else:
            order = torch.randperm(len(self), generator=generator)
            is_out = torch.zeros(len(self), dtype=torch.bool)
            is_out[order[: max(1, round(held_out * len(self)))]] = True
        if is_out.all() or not is_out.any():
            raise ValueError("the split leaves one side empty; change held_out")
        return self.subset((~is_out).nonzero()[:, 0]), self.subset(is_out.nonzero()[:, 0])


def single_token_words(tokenizer, words: list[str]) -> list[str]:
    """The words that are one token with a leading space (how they occur mid-sentence)."""
    return [w for w in words if len(tokenizer.encode(" " + w)) == 1]


def bos_prefix(tokenizer) -> list[int]:
    """The tokenizer's beginning-of-sequence token, if it has one, as a prefix. Models put an
    attention sink and their massive activations on the first token; a BOS token there keeps
    those off the words being studied."""
    bos = getattr(getattr(tokenizer, "hf", None), "bos_token_id", None)
    return [] if bos is None else [bos]


def ioi_prompts(tokenizer, n: int = 120, seed: int = 0, templates: list[str] = IOI_TEMPLATES) -> ContrastSet:
    """Indirect-object identification (Wang et al. 2023): "When Mary and John went to the store,
    John gave a drink to" -> " Mary" (the indirect object, IO), foil " John" (the subject, S).

    The counterfactual swaps which name is repeated, so its answer is the other name; the
    ``"abc"`` corruption names a third person instead, so neither name is repeated. Names,
    places and objects are single tokens; the prompts are kept to the most common token length
    (templates can differ in length) so that they batch without padding. The two name orders
    (ABB, BAB) are balanced. Token ids start with the tokenizer's BOS token, if any.
    ``positions`` locates IO, S1 (the subject's first mention), S1+1, S2 and the end.
    """
    names, places = single_token_words(tokenizer, NAMES), single_token_words(tokenizer, PLACES)
    objects = single_token_words(tokenizer, OBJECTS)
    rng, third_names = random.Random(seed), random.Random(seed + 1)  # the second keeps the first's draws
    rows = []
    for i in range(n * 3):
        template = i % len(templates)
        io, subject = rng.sample(names, 2)
        first, second = (io, subject) if i % 2 == 0 else (subject, io)
        fill = {"place": rng.choice(places), "object": rng.choice(objects)}
        third = third_names.choice([name for name in names if name not in (io, subject)])
        # after the comma the subject is named again; the counterfactual names the other one
        texts = [_repeat_name(templates[template], first, second, r, fill) for r in (subject, io, third)]
        rows.append((texts, io, subject, template))
    bos = bos_prefix(tokenizer)
    encoded = [[bos + tokenizer.encode(t) for t in texts] for texts, *_ in rows]
    lengths = [len(e[0]) for e in encoded if len({len(x) for x in e}) == 1]
    common = max(set(lengths), key=lengths.count)
    keep = [(r, e) for r, e in zip(rows, encoded, strict=True) if {len(x) for x in e} == {common}][:n]
    if len(keep) < n:
        raise ValueError(f"only {len(keep)} IOI prompts share a token length; ask for fewer")
    answers = torch.tensor([tokenizer.encode(" " + r[1])[0] for r, _ in keep])
    foils = torch.tensor([tokenizer.encode(" " + r[2])[0] for r, _ in keep])
    tokens = torch.tensor([e[0] for _, e in keep])
    return ContrastSet(
        text=[r[0][0] for r, _ in keep],
        tokens=tokens,
        answers=answers,
        foils=foils,
        counterfactual=torch.tensor([e[1] for _, e in keep]),
        corruptions={"abc": torch.tensor([e[2] for _, e in keep])},
        positions=_ioi_positions(tokens, answers, foils),
        group=torch.tensor([r[3] for r, _ in keep]),
    )


# Subject-verb agreement across an attractor (the Catalogue's syntactic heads): nouns whose
# singular and plural are common words, and preposition phrases of different lengths.
AGREEMENT_NOUNS = [
    ("key", "keys"), ("dog", "dogs"), ("book", "books"), ("car", "cars"), ("girl", "girls"),
    ("boy", "boys"), ("house", "houses"), ("tree", "trees"), ("door", "doors"), ("table", "tables"),
    ("friend", "friends"), ("student", "students"), ("teacher", "teachers"), ("letter", "letters"),
    ("bird", "birds"), ("cat", "cats"), ("window", "windows"), ("road", "roads"), ("flower", "flowers"),
    ("picture", "pictures"), ("bottle", "bottles"), ("chair", "chairs"), ("ship", "ships"),
    ("box", "boxes"), ("horse", "horses"), ("king", "kings"), ("doctor", "doctors"),
    ("farmer", "farmers"), ("player", "players"), ("song", "songs"), ("game", "games"),
    ("lamp", "lamps"), ("cup", "cups"), ("stone", "stones"), ("river", "rivers"),
    ("bridge", "bridges"), ("room", "rooms"), ("wall", "walls"), ("hill", "hills"),
    ("village", "villages"), ("boat", "boats"), ("bag", "bags"), ("coat", "coats"), ("shop", "shops"),
]  # fmt: skip
PREPOSITIONS = ["near", "behind", "beside", "under", "above", "next to", "close to", "far from",
                "across from", "on top of", "in front of", "to the left of"]  # fmt: skip
AGREEMENT_VERBS = (" is", " are")  # singular, plural


@dataclass
class AgreementSet:
    """Sentences "The {subject} {preposition} the {attractor}" whose next word, a verb, must agree
    with the subject and not with the nearer attractor (one is singular, the other plural).
    Their lengths differ (the preposition phrases do), so each sentence is a tensor of its own."""

    text: list[str]
    tokens: list[Tensor]  # each [pos]
    subject: Tensor  # [n] the subject noun's position
    first: Tensor  # [n] the position of "The": it and every key before it take the attention sinks
    answers: Tensor  # [n] the agreeing verb
    foils: Tensor  # [n] the other verb

    def __len__(self) -> int:
        return len(self.text)


def agreement_sentences(tokenizer, nouns: list[tuple[str, str]], n: int, seed: int = 0) -> AgreementSet:
    """``n`` agreement sentences from ``nouns`` (singular, plural pairs), half with a singular
    subject and a plural attractor, half the reverse, preposition phrases drawn at random.
    Sentences whose tokens are not the concatenation of their words' tokens are redrawn, so
    ``subject`` is exact. Token ids start with the tokenizer's BOS token, if any."""

    def one_token(word: str) -> bool:
        return len(tokenizer.encode(" " + word)) == 1

    usable = [(a, b) for a, b in nouns if one_token(a) and one_token(b)]
    if len(usable) < 2:
        raise ValueError(f"{len(usable)} of these nouns are one token in both numbers; need two")
    verbs = [tokenizer.encode(v) for v in AGREEMENT_VERBS]
    if any(len(v) != 1 for v in verbs):
        raise ValueError("this tokenizer splits ' is' or ' are'")
    bos, rng = bos_prefix(tokenizer), random.Random(seed)
    rows = []
    for _ in range(n * 20):
        if len(rows) == n:
            break
        subject, attractor = rng.sample(usable, 2)
        singular_subject = len(rows) % 2 == 0
        words = (subject[0], attractor[1]) if singular_subject else (subject[1], attractor[0])
        text = f"The {words[0]} {rng.choice(PREPOSITIONS)} the {words[1]}"
        ids = bos + tokenizer.encode(text)
        start = len(bos) + len(tokenizer.encode("The"))
        subject_id, attractor_id = (tokenizer.encode(" " + w)[0] for w in words)
        if ids[start] != subject_id or ids[-1] != attractor_id:
            continue  # the words did not tokenize on their own
        rows.append((text, ids, start, singular_subject))
    if len(rows) < n:
        raise ValueError(f"only {len(rows)} agreement sentences tokenize word by word; ask for fewer")
    answer = {True: verbs[0][0], False: verbs[1][0]}
    return AgreementSet(
        text=[r[0] for r in rows],
        tokens=[torch.tensor(r[1]) for r in rows],
        subject=torch.tensor([r[2] for r in rows]),
        first=torch.tensor([r[2] - 1 for r in rows]),
        answers=torch.tensor([answer[r[3]] for r in rows]),
        foils=torch.tensor([answer[not r[3]] for r in rows]),
    )


def agreement_splits(tokenizer, n: int = 64, seed: int = 0) -> tuple[AgreementSet, AgreementSet]:
    """Two agreement sets on disjoint halves of ``AGREEMENT_NOUNS`` (split at random by ``seed``):
    one to choose heads on, one to measure them on words the choice never saw."""
    nouns = list(AGREEMENT_NOUNS)
    random.Random(seed).shuffle(nouns)
    half = len(nouns) // 2
    return (agreement_sentences(tokenizer, nouns[:half], n, seed),
            agreement_sentences(tokenizer, nouns[half:], n, seed + 1))  # fmt: skip


@torch.no_grad()
def agreement_margins(model: Transformer, sentences: AgreementSet, fwd_hooks=()) -> Tensor:
    """Per sentence, the logit of the agreeing verb minus the other's at the last position,
    with ``fwd_hooks`` applied (``[n]``)."""
    margins = []
    for tokens, answer, foil in zip(sentences.tokens, sentences.answers, sentences.foils, strict=True):
        logits = model.run_with_hooks(tokens[None], list(fwd_hooks))[0, -1].float()
        margins.append(logits[answer] - logits[foil])
    return torch.stack(margins)


RETRIEVAL_TEMPLATE = (
    "{A} lives in {X}. {B} lives in {Y}. {C} lives in {Z}. Question: where does {Q} live? Answer:"
)


def retrieval_prompts(tokenizer, n: int = 64, seed: int = 0) -> ContrastSet:
    """Context retrieval (Variengien and Winsor 2023): three people and the cities they live in,
    then a question about one of them; the answer is that person's city, found only in the
    context (cities are assigned at random, so knowledge cannot answer). The counterfactual asks
    about another of the three, so the context is the same and one token differs: the request.
    Names and cities are single tokens; ``positions`` holds "request" (where the asked name sits
    in the question) and "end"."""
    names = single_token_words(tokenizer, NAMES)
    cities = single_token_words(tokenizer, sorted(set(CAPITALS.values())))
    rng = random.Random(seed)
    bos = bos_prefix(tokenizer)
    rows = []
    for _ in range(n * 3):
        people, places = rng.sample(names, 3), rng.sample(cities, 3)
        asked, other = rng.sample(range(3), 2)
        fill = dict(zip("ABC", people, strict=True)) | dict(zip("XYZ", places, strict=True))
        texts = [RETRIEVAL_TEMPLATE.format(Q=people[q], **fill) for q in (asked, other)]
        ids = [bos + tokenizer.encode(t) for t in texts]
        if len(ids[0]) == len(ids[1]):
            rows.append((texts[0], ids, places[asked], places[other]))
    common = max({len(r[1][0]) for r in rows}, key=[len(r[1][0]) for r in rows].count)
    rows = [r for r in rows if len(r[1][0]) == common][:n]
    if len(rows) < n:
        raise ValueError(f"only {len(rows)} retrieval prompts share a token length; ask for fewer")
    tokens = torch.tensor([r[1][0] for r in rows])
    counterfactual = torch.tensor([r[1][1] for r in rows])
    differs = tokens != counterfactual
    if not (differs.sum(1) == 1).all():
        raise ValueError("a retrieval prompt and its counterfactual should differ in one token")
    return ContrastSet(
        text=[r[0] for r in rows],
        tokens=tokens,
        answers=torch.tensor([tokenizer.encode(" " + r[2])[0] for r in rows]),
        foils=torch.tensor([tokenizer.encode(" " + r[3])[0] for r in rows]),
        counterfactual=counterfactual,
        positions={"request": differs.int().argmax(1), "end": torch.full((len(rows),), tokens.shape[1] - 1)},
    )


def _ioi_positions(tokens: Tensor, io: Tensor, subject: Tensor) -> dict[str, Tensor]:
    """Where IO, S1, S1+1, S2 and the end sit in each prompt: ``{name: [n]}``."""
    columns = torch.arange(tokens.shape[1])
    is_io, is_s = tokens == io[:, None], tokens == subject[:, None]
    if not (is_io.sum(1) == 1).all() or not (is_s.sum(1) == 2).all():
        raise ValueError("an IOI prompt should name the indirect object once and the subject twice")
    s1 = torch.where(is_s, columns, tokens.shape[1]).min(1).values
    return {
        "IO": torch.where(is_io, columns, 0).max(1).values,
        "S1": s1,
        "S1+1": s1 + 1,
        "S2": torch.where(is_s, columns, -1).max(1).values,
        "end": torch.full_like(s1, tokens.shape[1] - 1),
    }


def _repeat_name(template: str, first: str, second: str, repeated: str, fill: dict) -> str:
    head, tail = template.split(", ", 1)
    return head.format(A=first, B=second, **fill) + ", " + tail.format(B=repeated, **fill)


def capital_prompts(tokenizer) -> PromptSet:
    """ "The capital of France is" -> " Paris", for capitals that are one token (prompts of the
    most common token length)."""
    rows = [
        (f"The capital of {country} is", " " + city)
        for country, city in CAPITALS.items()
        if len(tokenizer.encode(" " + city)) == 1
    ]
    encoded = [bos_prefix(tokenizer) + tokenizer.encode(text) for text, _ in rows]
    common = max({len(e) for e in encoded}, key=[len(e) for e in encoded].count)
    keep = [(r, e) for r, e in zip(rows, encoded, strict=True) if len(e) == common]
    return PromptSet(
        text=[r[0] for r, _ in keep],
        tokens=torch.tensor([e for _, e in keep]),
        answers=torch.tensor([tokenizer.encode(r[1])[0] for r, _ in keep]),
    )


@torch.no_grad()
def answer_accuracy(model: Transformer, tokens: Tensor, answers: Tensor, foils: Tensor | None = None) -> dict:
    """How well the model does the task: top-1 accuracy on the answer; with foils, how often
    the answer beats the foil and the mean logit difference."""
    logits = model(tokens, logits_to_keep=1)[:, -1].float()
    result = {"top-1 accuracy": (logits.argmax(-1) == answers).float().mean().item()}
    if foils is not None:
        diff = LogitDiff(answers, foils)(logits)
        result |= {
            "answer beats foil": (diff > 0).float().mean().item(),
            "mean logit difference": diff.mean().item(),
        }
    return result
