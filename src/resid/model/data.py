"""Text that is on every machine, and the tokenizers that turn it into model input.

Nothing here downloads: the default corpora ship with CPython itself.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Callable
from functools import cache
from pathlib import Path

import torch
from torch import Tensor

from resid.runtime.provenance import record_input


def pydoc_text() -> str:
    """The English documentation topics every CPython ships (``help('topics')``)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def stdlib_source(max_chars: int = 20_000_000) -> str:
    """Python source of the standard library: a large code corpus that is always offline."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    return "\n\n".join(parts)


CORPORA: dict[str, Callable[[], str]] = {"pydoc": pydoc_text, "stdlib": stdlib_source}


@cache
def corpus(name: str) -> str:
    """A corpus by name: one of ``CORPORA``, or ``hf:<dataset>[:<config>]`` via Hugging Face ``datasets``.

    The ``hf:`` form concatenates the ``text`` column of the train split, and needs the dataset
    hub or a local copy.
    """
    if name in CORPORA:
        text = CORPORA[name]()
        record_input(f"corpus {name}", text_hash(text))
        return text
    if name.startswith("hf:"):
        try:
            import datasets
        except ImportError:
            raise ValueError(f"corpus {name!r} needs the `datasets` package") from None
        dataset_name, _, config = name[3:].partition(":")
        rows = datasets.load_dataset(dataset_name, config or None, split="train")
        return "\n\n".join(rows["text"])
    raise ValueError(f"unknown corpus {name!r}; choose one of {sorted(CORPORA)} or 'hf:<dataset>'")


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ByteTokenizer:
    """UTF-8 bytes as tokens: the vocabulary of the small models trained in this book."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class HFTokenizer:
    """A Hugging Face tokenizer behind the same two calls as ``ByteTokenizer``.

    ``add_special_tokens`` is on for encoders, which expect [CLS] ... [SEP].
    """

    def __init__(self, tokenizer, add_special_tokens: bool = False):
        self.hf = tokenizer
        self.add_special_tokens = add_special_tokens
        self.vocab_size = len(tokenizer)

    def encode(self, text: str) -> list[int]:
        # verbose=False: a long text is tokenized to be cut into windows, never fed whole to the
        # model, so the tokenizer's warning about sequences past the model's length is noise
        return self.hf(text, add_special_tokens=self.add_special_tokens, verbose=False)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode(ids)

    def batch(self, texts: list[str]) -> tuple[Tensor, Tensor]:
        """Padded ``(tokens, attention_mask)`` for a list of texts."""
        out = self.hf(texts, add_special_tokens=self.add_special_tokens, padding=True, return_tensors="pt")
        return out["input_ids"], out["attention_mask"]


def token_ids(text: str, tokenizer, chunk_chars: int = 100_000) -> Tensor:
    """Tokenize a long text in chunks (split on blank lines, so no word is cut in two)."""
    ids: list[int] = []
    start = 0
    while start < len(text):
        end = text.find("\n\n", start + chunk_chars)
        end = len(text) if end == -1 else end
        ids.extend(tokenizer.encode(text[start:end]))
        start = end
    return torch.tensor(ids, dtype=torch.long)


def windows(ids: Tensor, length: int, n: int, seed: int = 0, skip: int = 0, bos: int | None = None) -> Tensor:
    """``n`` non-overlapping windows of ``length`` tokens, chosen at random: ``[n, length]``.

    ``skip`` passes over the first windows of the same draw, so ``windows(ids, L, m, seed,
    skip=n)`` shares no window with ``windows(ids, L, n, seed)``: data held out from an earlier
    reading. ``bos`` puts that token first in every window, before ``length - 1`` tokens of text,
    for a model trained with one (see ``leading_bos``).
    """
    body = length - (bos is not None)
    available = len(ids) // body
    if skip + n > available:
        raise ValueError(f"asked for {n} windows of {body} tokens after {skip}; the text holds {available}")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randperm(available, generator=generator)[skip : skip + n].sort().values * body
    drawn = torch.stack([ids[s : s + body] for s in starts.tolist()])  # [n, body]
    if bos is None:
        return drawn
    return torch.cat([torch.full((n, 1), bos, dtype=drawn.dtype), drawn], dim=1)  # [n, length]


def leading_bos(tokenizer) -> int | None:
    """The BOS token id when the tokenizer starts its own encodings with it (Gemma does, SmolLM2
    does not): text windows fed to that model should start with it too."""
    hf = getattr(tokenizer, "hf", None)
    if hf is None or hf.bos_token_id is None:
        return None
    return hf.bos_token_id if hf(" x", add_special_tokens=True)["input_ids"][0] == hf.bos_token_id else None


def random_batch(ids: Tensor, batch_size: int, length: int, seed: int) -> Tensor:
    """A training batch of ``length``-token windows at random offsets, determined by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(ids) - length, (batch_size,), generator=generator)
    return torch.stack([ids[s : s + length] for s in starts.tolist()])


def repeated_random_batch(
    batch_size: int, length: int, vocab_size: int, seed: int, period: int | None = None
) -> Tensor:
    """Random tokens that repeat with a period: the data on which induction heads form.

    Each sequence is a random segment repeated to fill ``length``. With ``period`` None each
    sequence draws its own period between ``length // 4`` and ``length // 2``, so that only
    matching content, not a fixed offset, predicts the repeat.
    """
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(batch_size):
        p = period or int(torch.randint(length // 4, length // 2 + 1, (1,), generator=generator))
        segment = torch.randint(0, vocab_size, (p,), generator=generator)
        rows.append(segment.repeat(-(-length // p))[:length])
    return torch.stack(rows)


def train_val_split(ids: Tensor, val_fraction: float = 0.05) -> tuple[Tensor, Tensor]:
    """The last ``val_fraction`` of the tokens is held out."""
    cut = int(len(ids) * (1 - val_fraction))
    return ids[:cut], ids[cut:]
