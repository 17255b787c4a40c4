"""The benchmarks' one timer."""

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeats: int = 3) -> float:
    """The fastest of ``repeats`` calls of ``fn`` after one warm-up call, in seconds."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
