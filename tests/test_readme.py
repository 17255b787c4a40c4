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


def test_the_readme_fits_a_screen_and_a_line():
    lines = README.read_text().splitlines()
    assert len(lines) <= 120, len(lines)
    long = [f"{i}: {len(line)}" for i, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, long


def test_the_chapter_table_is_what_the_chapters_computed():
    from resid.book.pages import README_MARKS, readme_table

    text = README.read_text()
    start, end = README_MARKS
    table = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert table == readme_table(), "stale: `python -m resid.book results` rewrites it"
    from resid.book.sources import chapters

    assert len(table.splitlines()) == 2 + len(chapters())


def test_each_answer_was_written_from_the_chapters_last_execution():
    """An answer in words goes stale when its chapter is re-executed: read it again against the new
    numbers, then set its ``executed`` to the new execution's."""
    import json
    import tomllib

    from resid.book.sources import chapters
    from resid.runtime.paths import CHAPTERS_OUT, ROOT

    answers = tomllib.loads((ROOT / "notebooks" / "answers.toml").read_text())
    assert set(answers) == set(chapters())
    for name, entry in answers.items():
        executed = json.loads((CHAPTERS_OUT / f"{name}.json").read_text())["execution"]["executed"]
        assert entry["executed"] == executed, (name, entry["executed"], executed)


def test_the_verdict_counts_are_read_from_the_chapters_json(tmp_path):
    from resid.book.pages import readme_table
    from resid.runtime.paths import CHAPTERS_OUT

    # a chapter whose JSON holds no claims counts none
    for path in CHAPTERS_OUT.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "tda.json").write_text('{"claims": []}')
    row = next(line for line in readme_table(tmp_path).splitlines() if line.startswith("| tda |"))
    assert row.endswith("| none yet |")
