"""Function vectors (Todd et al. 2024; Hendel et al. 2023): a few heads, reading in-context
examples of a task, write a vector at the last position that makes the model do the task; their
summed mean outputs, added to a zero-shot prompt, do it without the examples.

The recipe, for a model and a task given as (input, output) word pairs:

1. ``icl_prompts``: "Q: x\\nA: y\\n\\n" ten times, then "Q: x\\nA:"; the answer is y's token.
2. ``mean_head_z``: every head's mean output (its ``hook_z``) at the last position over clean
   prompts; ``average_indirect_effect``: how much putting that mean into a head of a prompt whose
   labels were shuffled raises the answer's probability.
3. ``function_vector``: the summed mean *writes* into the residual (``head_writes``) of the
   heads with the largest effect; ``add_at`` adds it at one boundary and position.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

from resid.model import HookFn, Transformer
from resid.model.cache import Head, HeadLike, act_name
from resid.stats.metrics import AnswerProbability

from .patching import patch_heads

# Four tasks written for this book: each a list of (input, output) words. A model uses the pairs
# whose two words are one token each with a leading space (``usable_pairs``).
FV_TASKS: dict[str, list[tuple[str, str]]] = {
    "antonym": [
        ("hot", "cold"), ("big", "small"), ("up", "down"), ("good", "bad"), ("fast", "slow"),
        ("high", "low"), ("long", "short"), ("open", "closed"), ("happy", "sad"), ("early", "late"),
        ("rich", "poor"), ("hard", "soft"), ("strong", "weak"), ("true", "false"), ("first", "last"),
        ("left", "right"), ("top", "bottom"), ("yes", "no"), ("full", "empty"), ("wet", "dry"),
        ("clean", "dirty"), ("thick", "thin"), ("wide", "narrow"), ("heavy", "light"), ("before", "after"),
        ("inside", "outside"), ("win", "lose"), ("buy", "sell"), ("push", "pull"), ("love", "hate"),
        ("young", "old"), ("near", "far"), ("cheap", "expensive"), ("best", "worst"), ("more", "less"),
        ("above", "below"), ("black", "white"), ("day", "night"), ("north", "south"), ("east", "west"),
        ("max", "min"), ("dark", "bright"), ("old", "new"), ("in", "out"), ("on", "off"),
        ("always", "never"), ("alive", "dead"), ("war", "peace"), ("friend", "enemy"), ("question", "answer"),
    ],
    "capital": [
        ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
        ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"), ("England", "London"),
        ("Egypt", "Cairo"), ("Greece", "Athens"), ("Canada", "Ottawa"), ("Australia", "Canberra"),
        ("India", "Delhi"), ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Poland", "Warsaw"),
        ("Austria", "Vienna"), ("Sweden", "Stockholm"), ("Norway", "Oslo"), ("Finland", "Helsinki"),
        ("Denmark", "Copenhagen"), ("Netherlands", "Amsterdam"), ("Belgium", "Brussels"),
        ("Hungary", "Budapest"), ("Turkey", "Ankara"), ("Iran", "Tehran"), ("Iraq", "Baghdad"),
        ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Chile", "Santiago"), ("Cuba", "Havana"),
        ("Thailand", "Bangkok"), ("Korea", "Seoul"), ("Vietnam", "Hanoi"), ("Colombia", "Bogota"),
        ("Israel", "Jerusalem"), ("Syria", "Damascus"), ("Lebanon", "Beirut"), ("Scotland", "Edinburgh"),
        ("Wales", "Cardiff"), ("Switzerland", "Bern"), ("Ukraine", "Kyiv"), ("Brazil", "Brasilia"),
        ("Nigeria", "Abuja"), ("Pakistan", "Islamabad"), ("Venezuela", "Caracas"), ("Qatar", "Doha"),
    ],
    "english_french": [
        ("dog", "chien"), ("cat", "chat"), ("house", "maison"), ("water", "eau"), ("book", "livre"),
        ("car", "voiture"), ("red", "rouge"), ("blue", "bleu"), ("green", "vert"), ("white", "blanc"),
        ("black", "noir"), ("day", "jour"), ("night", "nuit"), ("sun", "soleil"), ("moon", "lune"),
        ("man", "homme"), ("woman", "femme"), ("child", "enfant"), ("friend", "ami"), ("city", "ville"),
        ("door", "porte"), ("bread", "pain"), ("wine", "vin"), ("milk", "lait"), ("apple", "pomme"),
        ("tree", "arbre"), ("sea", "mer"), ("mountain", "montagne"), ("love", "amour"), ("time", "temps"),
        ("world", "monde"), ("hand", "main"), ("head", "tête"), ("big", "grand"), ("small", "petit"),
        ("good", "bon"), ("new", "nouveau"), ("year", "année"), ("week", "semaine"), ("king", "roi"),
        ("father", "père"), ("mother", "mère"), ("brother", "frère"), ("fire", "feu"), ("rain", "pluie"),
        ("snow", "neige"), ("bird", "oiseau"), ("fish", "poisson"), ("street", "rue"), ("life", "vie"),
    ],
    "uppercase": [
        (w, w.upper()) for w in (
            "cat dog run sun red car map box key cup hat pen top one two ten yes new old big end day way "
            "man boy art air sea ice oil war law age job fun bus gas tax web app api url sql pdf css html "
            "json xml http id ok usa uk eu un cpu gpu ram usb faq ceo tv dvd pc ai ml nasa fbi cia"
        ).split()
    ],
}  # fmt: skip

# A fifth task, the next item of a sequence, kept apart from FV_TASKS so that the four-task
# claims keep their tasks: number words, the days and the months (each wrapping round once), and
# the letters. 63 pairs, as notebooks/criteria/catalogue.toml states.
_SEQUENCES = [
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty".split(),
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday Monday".split(),
    "January February March April May June July August September October November December January".split(),
    list("abcdefghijklmnopqrstuvwxyz"),
]
NEXT_ITEM: list[tuple[str, str]] = [p for seq in _SEQUENCES for p in zip(seq[:-1], seq[1:], strict=True)]


def usable_pairs(tokenizer, pairs: list[tuple[str, str]]) -> list[tuple[int, int]]:
    """The pairs whose input and output are one token each with a leading space: token ids."""
    out = []
    for x, y in pairs:
        xs, ys = tokenizer.encode(" " + x), tokenizer.encode(" " + y)
        if len(xs) == 1 and len(ys) == 1:
            out.append((xs[0], ys[0]))
    return out


def _template_ids(tokenizer) -> tuple[list[int], list[int], list[int]]:
    """The token ids of "Q:", "\\nA:" and "\\n\\n", tokenized once, so that every prompt of a task
    has the same length and every word sits at a known position."""
    return tokenizer.encode("Q:"), tokenizer.encode("\nA:"), tokenizer.encode("\n\n")


def icl_prompts(
    tokenizer,
    demos: list[tuple[int, int]],
    queries: list[tuple[int, int]],
    n_shots: int = 10,
    seed: int = 0,
    shuffle_labels: bool = False,
    prefix: list[int] | None = None,
) -> tuple[Tensor, Tensor]:
    """One prompt per query: ``n_shots`` demonstrations drawn from ``demos`` (never the query's
    own pair), then the query, "Q: x\\nA:". With ``shuffle_labels`` the demonstrations' outputs
    are permuted among them (Todd et al.'s corrupted prompts: the format without the task), the
    demonstrations themselves the same as without it.
    ``n_shots=0`` makes zero-shot prompts. Returns ``(tokens [query, pos], answers [query])``."""
    q, a, gap = _template_ids(tokenizer)
    rng, shuffler = random.Random(seed), random.Random(seed + 1)  # the same demonstrations either way
    rows, answers = [], []
    for x, y in queries:
        pool = [d for d in demos if d[0] != x]
        if len(pool) < n_shots:
            raise ValueError(f"{n_shots} demonstrations asked for, {len(pool)} available")
        shots = rng.sample(pool, n_shots)
        outputs = [o for _, o in shots]
        if shuffle_labels:
            shuffler.shuffle(outputs)
        ids = list(prefix or [])
        for (i, _), o in zip(shots, outputs, strict=True):
            ids += q + [i] + a + [o] + gap
        rows.append(ids + q + [x] + a)
        answers.append(y)
    return torch.tensor(rows), torch.tensor(answers)


@torch.no_grad()
def head_writes(model: Transformer, tokens: Tensor, position: int = -1) -> Tensor:
    """What every head adds to the residual stream at ``position``: ``[batch, layer, head,
    d_model]`` (``ActivationCache.stack_head_results``: in a sandwich-norm block each head's
    share of the normalised output). Summed over heads, plus any output bias, it is the
    attention block's output there."""
    names = [act_name("z", layer) for layer in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names, logits_to_keep=1)
    stack = cache.stack_head_results(pos_slice=position).float()  # [layer * head, batch, d_model]
    return stack.view(model.cfg.n_layers, model.cfg.n_heads, *stack.shape[1:]).permute(2, 0, 1, 3)


@torch.no_grad()
def mean_head_z(model: Transformer, tokens: Tensor, position: int = -1) -> list[Tensor]:
    """Every head's mean output before ``W_O`` at ``position`` over the prompts: one ``[head,
    d_head]`` per layer, what ``average_indirect_effect`` patches in."""
    names = [act_name("z", layer) for layer in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens, names, logits_to_keep=1)
    return [cache[name][:, position].float().mean(0) for name in names]


@torch.no_grad()
def average_indirect_effect(
    model: Transformer, corrupted: Tensor, answers: Tensor, mean_z: list[Tensor]
) -> Tensor:
    """Per head, the rise in the answer's probability when the head's output at the last
    position of each corrupted prompt is replaced by its task mean (``mean_head_z``), averaged
    over prompts: ``[layer, head]``. Only the last position is patched, so every earlier one
    keeps its corrupted values."""
    names = [act_name("z", layer) for layer in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(corrupted, names, logits_to_keep=1)
    patched_in = {}
    for name, mean in zip(names, mean_z, strict=True):
        values = cache[name].clone()
        values[:, -1] = mean.to(values.dtype)
        patched_in[name] = values
    metric = AnswerProbability(answers)
    base = metric(model(corrupted, logits_to_keep=1)[:, -1]).mean()
    return patch_heads(model, corrupted, patched_in, metric) - base.item()


@torch.no_grad()
def function_vector(model: Transformer, tokens: Tensor, heads: list[HeadLike]) -> Tensor:
    """The summed mean write into the residual of ``heads`` (any spelling) at the last position
    of ``tokens`` (clean in-context prompts of one task): ``[d_model]``."""
    writes = head_writes(model, tokens).mean(0)  # [layer, head, d_model]
    return torch.stack([writes[layer, head] for layer, head in map(Head.of, heads)]).sum(0)


def add_at(boundary: int, vector: Tensor, position: int = -1) -> list[tuple[str, HookFn]]:
    """A hook that adds ``vector`` (``[d_model]``) to the residual stream entering block
    ``boundary`` at ``position``, for ``run_with_hooks``."""

    def hook(x: Tensor, hook_point) -> Tensor:
        x = x.clone()
        x[:, position] += vector.to(x.dtype)
        return x

    return [(act_name("resid_pre", boundary), hook)]


@torch.no_grad()
def top1_hits(model: Transformer, tokens: Tensor, answers: Tensor, hooks: list | None = None) -> Tensor:
    """Per prompt, whether the answer is the most likely next token: ``[batch]`` floats."""
    logits = model.run_with_hooks(tokens, hooks or [], logits_to_keep=1)[:, -1]
    return (logits.argmax(-1) == answers).float()


@torch.no_grad()
def zero_shot_hits(
    model: Transformer,
    tokens: Tensor,
    answers: Tensor,
    boundary: int,
    vector: Tensor,
    n_random: int = 5,
    generator: torch.Generator | None = None,
) -> dict[str, Tensor]:
    """Per zero-shot prompt, whether the answer is the top token: as it is (``"plain"``), with
    ``vector`` added at the last position entering block ``boundary`` (``"vector"``), and with a
    random direction of the same norm (``"random"``, the mean over ``n_random`` draws: Todd et
    al.'s control, which separates the vector's direction from its size). Each ``[batch]``."""
    randoms = []
    for _ in range(n_random):
        direction = torch.randn(vector.shape[-1], generator=generator)
        random_vector = direction / direction.norm() * vector.norm()
        randoms.append(top1_hits(model, tokens, answers, add_at(boundary, random_vector)))
    return {
        "plain": top1_hits(model, tokens, answers),
        "vector": top1_hits(model, tokens, answers, add_at(boundary, vector)),
        "random": torch.stack(randoms).mean(0),
    }
