"""The README's code runs: every ```python block, in order, in one namespace."""

import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readmes_examples_run():
    blocks = python_blocks()
    assert blocks, "the README has no python example"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - the README is ours
    relevance, terms = namespace["relevance"], namespace["terms"]
    assert namespace["effects"].shape == (namespace["model"].cfg.n_layers, namespace["model"].cfg.n_heads)
    assert namespace["dla"].shape == (namespace["heads"].shape[0], 1)
    assert relevance.shape == namespace["clean"][0].shape and terms["relative error"] < 1e-4
