"""Progress a reader can watch in the terminal while a chapter executes.

A chapter runs in a Jupyter kernel, whose output goes into the notebook, not to the terminal
that ran ``make book``. The chapter runner therefore names a file in ``$RESID_PROGRESS`` and
echoes whatever is written to it; long work (a training run, a model conversion, a sweep)
reports there: which item of how many, a bar with the time left. Outside the runner nothing is
set and these functions are silent unless asked to show a bar.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TypeVar

from tqdm import tqdm

T = TypeVar("T")
ENV = "RESID_PROGRESS"
_stream: IO[str] | None = None


def stream() -> IO[str] | None:
    """The runner's progress file, opened once for appending; None outside the runner."""
    global _stream
    path = os.environ.get(ENV)
    if not path:
        return None
    if _stream is None or _stream.name != path:
        _stream = open(path, "a", buffering=1)  # noqa: SIM115 - kept open for the process's life
    return _stream


def note(message: str) -> None:
    """One line for the terminal watching the chapter (and nothing in the notebook)."""
    out = stream()
    if out is not None:
        out.write(f"[resid]   {message}\n")


def bar(total: int, desc: str, initial: int = 0, show: bool = False) -> tqdm:
    """A tqdm bar: to the runner's terminal when there is one, else to stderr if ``show``.

    In the runner's terminal it redraws at most every 10 s, so a log (CI's) stays short.
    """
    out = stream()
    return tqdm(
        total=total, initial=initial, desc=desc, file=out or sys.stderr, disable=out is None and not show,
        mininterval=10 if out is not None else 0.1, dynamic_ncols=out is None,
    )  # fmt: skip


def track(items: Iterable[T], desc: str) -> Iterator[T]:
    """``items`` one by one, announcing each (``desc 3/13: item``) in the runner's terminal."""
    items = list(items)
    for i, item in enumerate(items, 1):
        note(f"{desc} {i}/{len(items)}: {_label(item)}")
        yield item


def _label(item: object) -> str:
    """A short name: a tuple of plain values in full, else its leading name."""
    plain = (str, int, float)
    if isinstance(item, tuple) and item and all(isinstance(v, plain) for v in item):
        return ", ".join(map(str, item))
    if isinstance(item, tuple) and item and isinstance(item[0], str):
        return item[0]
    return str(item)[:60]


def steps(items: Iterable[T], desc: str, show: bool = False) -> Iterator[T]:
    """``items`` with a bar in the runner's terminal (elsewhere only if ``show``): for a long sweep."""
    items = list(items)
    with bar(len(items), desc, show=show) as shown:
        for item in items:
            yield item
            shown.update()
