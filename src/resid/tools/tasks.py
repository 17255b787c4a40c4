"""Offline benchmarks with exact answers, scored under any execution plan.

The paper's benchmarks (ARC, HellaSwag, GSM8K, LAMBADA, GLUE) cannot be downloaded here. These
keep its distinction between tasks that need semantics and tasks that need step-by-step
processing, and are built from text on every machine or generated with known answers.

A decoder task is a batch of token rows and a list of targets: "at (row, position) the next
token should be t". One forward pass per plan scores every target; a task turns the per-target
log-probabilities and argmax hits into its score.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from resid.model import Transformer, data
from resid.runtime.progress import steps as progress_steps

from .plans import Plan, run_plans

SEMANTIC, STEPWISE = "semantic", "step-by-step"


@dataclass
class Task:
    name: str
    family: str  # SEMANTIC or STEPWISE
    kind: str  # "loss": perplexity; "exact": every answer token is the argmax; "choice": best option wins
    description: str
    chance: float  # the score of a uniform guess (for "loss": the perplexity of a uniform guess)
    tokens: Tensor  # [rows, length], right-padded
    rows: Tensor  # [targets]; target k is predicted at (rows[k], positions[k])
    positions: Tensor
    targets: Tensor
    group: Tensor  # [targets]: the item ("exact") or option ("choice") a target belongs to
    n_options: int = 1  # "choice": options per item, consecutive groups, the true one first

    @property
    def n_items(self) -> int:
        """The units a bootstrap resamples: items, or for "loss" the token rows (windows)."""
        if self.kind == "loss":
            return len(self.tokens)
        n_groups = int(self.group.max()) + 1
        return n_groups // self.n_options

    def item_values(self, logprob: Tensor, hit: Tensor) -> Tensor:
        """One value per item, in float64: whether it was right, or for "loss" each row's mean
        log-probability (every perplexity window scores the same number of tokens)."""
        if self.kind == "loss":
            sums = torch.zeros(len(self.tokens), dtype=torch.float64).index_add_(
                0, self.rows, logprob.double()
            )
            return sums / torch.bincount(self.rows, minlength=len(self.tokens)).clamp(min=1)
        n_groups = int(self.group.max()) + 1
        if self.kind == "exact":
            misses = torch.zeros(n_groups).index_add_(0, self.group, (~hit).float())
            return (misses == 0).double()
        totals = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, self.group, logprob.double())
        return (totals.view(-1, self.n_options).argmax(-1) == 0).double()

    def score_items(self, values: Tensor) -> float:
        """Perplexity for "loss", accuracy otherwise, from ``item_values``."""
        mean = values.double().mean().item()
        return math.exp(-mean) if self.kind == "loss" else mean

    def score(self, logprob: Tensor, hit: Tensor) -> float:
        return self.score_items(self.item_values(logprob, hit))

    def normalised(self, score, full):
        """1 for the unmodified model, 0 for chance (for perplexity: in log space). Floats or
        tensors of scores (say, one per bootstrap resample)."""
        if self.kind == "loss":
            log = torch.log if isinstance(score, Tensor) else math.log
            return (math.log(self.chance) - log(score)) / (math.log(self.chance) - log(full))
        return (score - self.chance) / (full - self.chance)


def _pad(rows: list[list[int]], pad: int = 0) -> Tensor:
    length = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (length - len(r)) for r in rows])


def packed_task(
    name: str, family: str, description: str, chance: float, examples: list[tuple[str, str]],
    items: list[tuple[str, str]], tokenizer, per_row: int = 10, prefix: list[int] | None = None,
) -> Task:  # fmt: skip
    """Few-shot by packing: every row starts with the same worked ``examples``, then holds
    ``per_row`` "prompt answer" lines, each scored and each seeing the earlier ones. ``prefix``
    (a BOS token, for a model trained with one: ``data.leading_bos``) starts every row."""
    rows, targets = [], []  # targets: (row, position, token, item)
    shots = list(prefix or []) + [
        t for prompt, answer in examples for t in tokenizer.encode(prompt + answer + "\n")
    ]
    for start in range(0, len(items), per_row):
        ids = list(shots)
        for k, (prompt, answer) in enumerate(items[start : start + per_row]):
            ids += tokenizer.encode(prompt)
            answer_ids = tokenizer.encode(answer)
            targets += [(len(rows), len(ids) + j - 1, t, start + k) for j, t in enumerate(answer_ids)]
            ids += answer_ids + tokenizer.encode("\n")
        rows.append(ids)
    r, p, t, g = (torch.tensor(col) for col in zip(*targets, strict=True))
    return Task(name, family, "exact", description, chance, _pad(rows), r, p, t, g)


def perplexity_task(windows: Tensor, vocab_size: int) -> Task:
    n, length = windows.shape
    rows = torch.arange(n).repeat_interleave(length - 1)
    positions = torch.arange(length - 1).repeat(n)
    return Task(
        "perplexity", SEMANTIC, "loss", "perplexity on windows of the Python documentation",
        float(vocab_size), windows, rows, positions, windows[:, 1:].flatten(), torch.zeros_like(rows),
    )  # fmt: skip


def word_recall_task(windows: Tensor, tokenizer, n_items: int, min_letters: int = 4) -> Task:
    """LAMBADA-style: predict a whole word (one token of 4+ letters) that already occurred
    earlier in the same passage, so that context, not local syntax, supplies it."""
    word = re.compile(rf"^ [A-Za-z]{{{min_letters},}}$")
    found = []
    for row, ids in enumerate(windows.tolist()):
        for pos in range(32, len(ids)):
            if word.match(tokenizer.decode([ids[pos]])) and ids[pos] in ids[:pos]:
                found.append((row, pos - 1, ids[pos]))
    if len(found) < n_items:
        raise ValueError(f"only {len(found)} recall items in the windows; use more windows")
    step = len(found) / n_items  # spread the items over all windows
    chosen = [found[int(i * step)] for i in range(n_items)]
    r, p, t = (torch.tensor(col) for col in zip(*chosen, strict=True))
    return Task(
        "word recall", SEMANTIC, "exact",
        "LAMBADA-style: the next word, seen earlier in the passage", 0.0, windows, r, p, t,
        torch.arange(n_items),
    )  # fmt: skip


def continuation_task(
    text: str, tokenizer, n_items: int, n_options: int = 3, context: int = 10, continuation: int = 4,
    seed: int = 0,
) -> Task:  # fmt: skip
    """HellaSwag-like: pick a sentence's true continuation against continuations of other
    sentences, by total log-likelihood (all options have the same number of tokens)."""
    rng = random.Random(seed)
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    prose = [p for p in paragraphs if len(p) > 80 and p[0].isupper() and p.endswith(".")]
    encoded = [ids for ids in map(tokenizer.encode, prose) if len(ids) >= context + continuation]
    rng.shuffle(encoded)
    if len(encoded) < n_items * n_options:
        raise ValueError("not enough sentences for the continuation task")
    rows, targets = [], []
    for item in range(n_items):
        true = encoded[item]
        options = [true[context : context + continuation]]
        for k in range(1, n_options):
            other = encoded[n_items + item * (n_options - 1) + k - 1]
            options.append(other[context : context + continuation])
        for k, option in enumerate(options):
            group = item * n_options + k
            targets += [(len(rows), context + j - 1, t, group) for j, t in enumerate(option)]
            rows.append(true[:context] + option)
    r, p, t, g = (torch.tensor(col) for col in zip(*targets, strict=True))
    return Task(
        "true continuation", SEMANTIC, "choice",
        f"HellaSwag-like: the true continuation of a sentence among {n_options}", 1 / n_options,
        _pad(rows), r, p, t, g, n_options,
    )  # fmt: skip


NAMES = ["Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Jack", "Emma", "Leo", "Zoe"]
OBJECTS = ["apples", "books", "coins", "cards", "pens", "stamps", "shells", "marbles"]


def stepwise_items(n: int, seed: int = 0) -> dict[str, tuple[str, float, list[tuple[str, str]]]]:
    """Generated tasks with known answers: name -> (description, chance, [(prompt, answer)])."""
    rng = random.Random(seed)

    def digits(k: int) -> list[str]:
        return [str(rng.randint(0, 9)) for _ in range(k)]

    addition = [(a, b) for a, b in ((rng.randint(10, 99), rng.randint(1, 9)) for _ in range(n))]
    one_step = [
        (rng.choice(NAMES), rng.choice(OBJECTS), rng.randint(1, 9), rng.randint(1, 9)) for _ in range(n)
    ]
    two_step = [
        (rng.choice(NAMES), rng.choice(OBJECTS), rng.randint(4, 9), rng.randint(1, 5), rng.randint(1, 3))
        for _ in range(n)
    ]
    counts = [rng.randint(1, 9) for _ in range(n)]
    lists = [digits(4) for _ in range(n)]
    starts = [rng.randint(10, 93) for _ in range(n)]
    return {
        "addition": ("two-digit plus one-digit", 1 / 99, [(f"{a}+{b}=", f"{a + b}") for a, b in addition]),
        "word problem": (
            "one-step word problem (GSM8K spirit)", 1 / 17,
            [(f"{w} has {a} {o} and gets {b} more. Now {w} has", f" {a + b}") for w, o, a, b in one_step],
        ),
        "two-step problem": (
            "two-step word problem (GSM8K spirit)", 1 / 13,
            [(f"{w} has {a} {o}, gets {b} more and gives away {c}. Now {w} has", f" {a + b - c}")
             for w, o, a, b, c in two_step],
        ),
        "counting": ("count the symbols", 1 / 9, [(" ".join(["x"] * k) + " :", f" {k}") for k in counts]),
        "reverse list": (
            "write four digits in reverse order", 1e-4,
            [(" ".join(d) + " ->", " " + " ".join(d[::-1])) for d in lists],
        ),
        "copy list": (
            "copy four digits", 1e-4, [(" ".join(d) + " =>", " " + " ".join(d)) for d in lists],
        ),
        "count on": (
            "continue counting by two from a two-digit number, carrying where the answer crosses a ten",
            1 / 90, [(f"{a}, {a + 2}, {a + 4},", f" {a + 6}") for a in starts],
        ),
    }  # fmt: skip


N_SHOTS = 3  # worked examples at the start of every packed row


def knowledge_task(
    name: str, pairs: list[tuple[str, str]], tokenizer, seed: int = 0, prefix: list[int] | None = None
) -> Task:
    """A semantic task in the step-by-step tasks' format: few-shot exact-match generation of
    " y" after " x ->", for the ``pairs`` (x, y) whose two words are one token each with a
    leading space (``function_vectors.FV_TASKS`` holds capitals, antonyms, translations).
    ``N_SHOTS`` pairs, drawn with ``seed``, are the worked examples, the rest the items; chance
    is a guess among the items' answers."""
    usable = [
        (x, y) for x, y in pairs if len(tokenizer.encode(" " + x)) == 1 == len(tokenizer.encode(" " + y))
    ]
    if len(usable) < N_SHOTS + 2:
        raise ValueError(
            f"task {name!r}: {len(usable)} pairs of one-token words; at least {N_SHOTS + 2} needed"
        )
    random.Random(seed).shuffle(usable)
    examples, items = usable[:N_SHOTS], usable[N_SHOTS:]
    lines = [(f" {x} ->", f" {y}") for x, y in items]
    chance = 1 / len({y for _, y in items})
    description = f"{name.replace('_', ' ')}: the word for a word, few-shot"
    shots = [(f" {x} ->", f" {y}") for x, y in examples]
    return packed_task(name, SEMANTIC, description, chance, shots, lines, tokenizer, prefix=prefix)


def one_format_suite(
    model: Transformer, knowledge: dict[str, list[tuple[str, str]]], n_items: int = 200, n_windows: int = 16,
    seed: int = 0, windows_seed: int | None = None, skip_windows: int = 0,
) -> list[Task]:  # fmt: skip
    """The decoder benchmark with every accuracy task scored one way, few-shot exact-match
    generation: word recall from the text and the ``knowledge`` tasks (semantic), the generated
    step-by-step tasks; perplexity and the true-continuation choice come along, to be shown apart.
    Items are generated with ``seed``; windows are the draw of ``windows_seed`` (``seed`` if
    not given) after its first ``skip_windows`` (text an earlier reading did not see); every row
    starts with the BOS token where the model's tokenizer puts one first."""
    tokenizer = model.tokenizer
    bos = data.leading_bos(tokenizer)
    prefix = [] if bos is None else [bos]
    text = data.corpus("pydoc")
    ids = data.token_ids(text, tokenizer)
    windows_seed = seed if windows_seed is None else windows_seed
    windows = data.windows(ids, 256, n_windows, seed=windows_seed, skip=skip_windows, bos=bos)
    suite = [
        perplexity_task(windows, model.cfg.vocab_size),
        word_recall_task(windows, tokenizer, n_items),
        continuation_task(text, tokenizer, n_items, seed=seed),
    ]
    suite += [
        knowledge_task(name, pairs, tokenizer, seed=seed, prefix=prefix) for name, pairs in knowledge.items()
    ]
    for name, (description, chance, items) in stepwise_items(n_items + N_SHOTS, seed).items():
        examples, scored = items[:N_SHOTS], items[N_SHOTS:]
        suite.append(
            packed_task(name, STEPWISE, description, chance, examples, scored, tokenizer, prefix=prefix)
        )
    return suite


def decoder_suite(model: Transformer, n_items: int = 200, n_windows: int = 16, seed: int = 0) -> list[Task]:
    """The decoder benchmark: three semantic tasks and seven step-by-step ones."""
    text = data.corpus("pydoc")
    ids = data.token_ids(text, model.tokenizer)
    windows = data.windows(ids, 256, n_windows, seed=seed)
    tasks = [
        perplexity_task(windows, model.cfg.vocab_size),
        word_recall_task(windows, model.tokenizer, n_items),
        continuation_task(text, model.tokenizer, n_items, seed=seed),
    ]
    for name, (description, chance, items) in stepwise_items(n_items + N_SHOTS, seed).items():
        examples, scored = items[:N_SHOTS], items[N_SHOTS:]
        tasks.append(packed_task(name, STEPWISE, description, chance, examples, scored, model.tokenizer))
    return tasks


def target_readout(
    model: Transformer, rows: Tensor, positions: Tensor, targets: Tensor, exact: Tensor
) -> Callable[[Tensor], tuple[Tensor, Tensor]]:
    """From the final residual to each target's log-probability and whether it is the argmax.

    Only the target positions go through the unembedding, a large part of a small LM's cost, and
    each target gets only what its task scores: whether it is the argmax where ``exact``
    (log-probability NaN), its log-probability elsewhere (hit False): on a CPU the log-softmax
    over the vocabulary and the argmax each cost about half as much as the unembedding.
    """
    scored = ~exact

    def readout(final_resid: Tensor) -> tuple[Tensor, Tensor]:
        logprob = torch.full(targets.shape, math.nan, device=targets.device)
        hit = torch.zeros(targets.shape, dtype=torch.bool, device=targets.device)
        if scored.any():
            logits = model.to_logits(final_resid[rows[scored], positions[scored]]).float()
            logprob[scored] = F.log_softmax(logits, -1).gather(-1, targets[scored, None]).squeeze(-1)
        if exact.any():
            logits = model.to_logits(final_resid[rows[exact], positions[exact]])
            # max's index is argmax's (the first maximum), and in bf16 on a CPU 4x faster
            hit[exact] = logits.max(-1).indices == targets[exact]
        return logprob, hit

    return readout


def score_plans(
    model: Transformer, tasks: list[Task], plans: list[Plan], batch_rows: int = 64, progress: bool = False,
    per_item: bool = False,
) -> list[dict]:  # fmt: skip
    """``[{task name: score} for each plan]``; with ``per_item``, ``{task name: item values}``
    (``Task.item_values``: what ``resampled_scores`` bootstraps).

    Every batch of rows runs all plans with their shared prefixes computed once, and tasks
    built on the same token rows (perplexity and word recall) share the forward passes.
    """
    results: list[dict[str, float]] = [{} for _ in plans]
    by_tokens: dict[int, list[Task]] = {}
    for task in tasks:
        by_tokens.setdefault(id(task.tokens), []).append(task)
    device = model.embed.weight.device
    desc = f"scoring {len(plans)} plans on {len(tasks)} tasks, by token set"
    for group in progress_steps(by_tokens.values(), desc, show=progress):
        tokens = group[0].tokens.to(device)
        rows, positions, targets = (
            torch.cat([getattr(t, f) for t in group]) for f in ("rows", "positions", "targets")
        )
        exact = torch.cat([torch.full((len(t.rows),), t.kind == "exact") for t in group])
        order = torch.argsort(rows, stable=True)  # batches of rows then hold contiguous targets
        rows, positions, targets, exact = (a[order].to(device) for a in (rows, positions, targets, exact))
        per_plan: list[tuple[list, list]] = [([], []) for _ in plans]
        for start in range(0, len(tokens), batch_rows):
            inside = (rows >= start) & (rows < start + batch_rows)
            readout = target_readout(
                model, rows[inside] - start, positions[inside], targets[inside], exact[inside]
            )
            outputs = run_plans(model, tokens[start : start + batch_rows], plans, readout=readout)
            for (logprobs, hits), (logprob, hit) in zip(per_plan, outputs, strict=True):
                logprobs.append(logprob)
                hits.append(hit)
        restore = torch.argsort(order).to(device)
        sizes = [len(t.rows) for t in group]
        for result, (logprobs, hits) in zip(results, per_plan, strict=True):
            logprob_parts = torch.cat(logprobs)[restore].split(sizes)
            hit_parts = torch.cat(hits)[restore].split(sizes)
            for task, logprob, hit in zip(group, logprob_parts, hit_parts, strict=True):
                values = task.item_values(logprob.cpu(), hit.cpu())
                result[task.name] = values if per_item else task.score_items(values)
    return results


def resampled_scores(
    tasks: list[Task], item_values: list[dict[str, Tensor]], n_resamples: int = 1000, seed: int = 0
) -> dict[str, Tensor]:
    """Every plan's score on each task, on bootstrap resamples of the task's items:
    ``{task name: [1 + n_resamples, plan]}``, row 0 the score on all items.

    Every plan sees the same resampled items, so a difference between plans (or a statistic of
    many plans, say a ranking) is computed within each resample and its interval is paired.
    """
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for task in tasks:
        values = torch.stack([per_plan[task.name] for per_plan in item_values]).double()  # [plan, item]
        n = values.shape[1]
        picks = torch.randint(0, n, (n_resamples, n), generator=generator)
        means = torch.cat(
            [values.mean(1, keepdim=True), values[:, picks].mean(-1)], 1
        ).T  # [1 + resample, plan]
        out[task.name] = torch.exp(-means) if task.kind == "loss" else means
    return out


def grown_loop_sweep(
    model: Transformer, task: Task, n_layers: int, n_grid: list[int], loops: int = 4, limit: int = 16,
    batch_rows: int = 64,
) -> tuple[list[tuple[int, int]], list[dict[str, Tensor]]]:  # fmt: skip
    """Looped parallel middle layers (``plans.parallel(..., loops=k)``) at every N of ``n_grid``
    for k = 1..``loops``, the grid grown (doubled, up to ``limit``) until the best k at every N
    lies inside it, judged on all of ``task``'s items. Returns the ``(M, k)`` keys, M = the
    parallel layers, and their item values (``score_plans(..., per_item=True)``), in one order."""
    from .plans import parallel

    keys: list[tuple[int, int]] = []
    values: list[dict[str, Tensor]] = []
    done = 0
    while True:
        new = [(n, k) for n in n_grid for k in range(done + 1, loops + 1)]
        plan_list = [parallel(n_layers, n, n_layers - n - 1, loops=k) for n, k in new]
        values += score_plans(model, [task], plan_list, batch_rows=batch_rows, per_item=True)
        keys += [(n_layers - 2 * n, k) for n, k in new]
        done = loops
        scores = {key: task.score_items(v[task.name]) for key, v in zip(keys, values, strict=True)}
        sign = 1 if task.kind == "loss" else -1  # perplexity: lower is better
        best = {m: min(range(1, done + 1), key=lambda k, m=m: sign * scores[(m, k)]) for m, _ in keys}
        if all(k < done for k in best.values()) or done >= limit:
            order = sorted(range(len(keys)), key=lambda i: keys[i])
            return [keys[i] for i in order], [values[i] for i in order]
        loops = min(limit, 2 * done)


# --- the encoder ---

PEOPLE = [
    ("A man", "A guy"),
    ("A woman", "A lady"),
    ("A child", "A kid"),
    ("An old man", "An elderly man"),
    ("A girl", "A young girl"),
    ("A boy", "A young boy"),
    ("A chef", "A cook"),
    ("A student", "A pupil"),
]
ACTIONS = [("is playing a guitar", "plays the guitar"), ("is reading a book", "reads a book"),
           ("is riding a bicycle", "rides a bike"), ("is cooking dinner", "prepares dinner"),
           ("is swimming in a lake", "swims in a lake"), ("is painting a wall", "paints a wall"),
           ("is eating an apple", "eats an apple"), ("is walking a dog", "walks a dog"),
           ("is writing a letter", "writes a letter"), ("is climbing a tree", "climbs a tree")]  # fmt: skip


def paraphrase_triples(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(anchor, paraphrase, non-paraphrase): the paraphrase rewords both halves; the
    non-paraphrase keeps the anchor's subject and changes what happens."""
    rng = random.Random(seed)
    triples = []
    for _ in range(n):
        (subject, subject2), (action, action2) = rng.choice(PEOPLE), rng.choice(ACTIONS)
        other = rng.choice([a for a in ACTIONS if a[0] != action])[0]
        triples.append((f"{subject} {action}.", f"{subject2} {action2}.", f"{subject} {other}."))
    return triples


def pooled_readout(mask: Tensor) -> Callable[[Tensor], Tensor]:
    """Mean-pool over real tokens and normalise, as sentence-transformers does for MiniLM."""

    def readout(final_resid: Tensor) -> Tensor:
        weights = mask.unsqueeze(-1).to(final_resid.dtype)
        pooled = (final_resid * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return F.normalize(pooled.float(), dim=-1)

    return readout


def embed_under_plans(
    model: Transformer, texts: list[str], plans: list[Plan], batch: int = 128
) -> list[Tensor]:
    """Sentence embeddings of ``texts`` under each plan: ``[len(texts), d_model]`` per plan."""
    chunks: list[list[Tensor]] = [[] for _ in plans]
    for start in range(0, len(texts), batch):
        tokens, mask = (
            a.to(model.embed.weight.device) for a in model.tokenizer.batch(texts[start : start + batch])
        )
        outputs = run_plans(model, tokens, plans, attention_mask=mask, readout=pooled_readout(mask))
        for chunk, output in zip(chunks, outputs, strict=True):
            chunk.append(output.cpu())
    return [torch.cat(chunk) for chunk in chunks]
