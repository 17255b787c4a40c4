"""The chapter pipeline end to end: papermill executes a chapter, Jupyter Book renders it."""

import json
import re
from html import unescape as html_unescape
from pathlib import Path

import pytest
import yaml

from resid import book

ROOT = Path(__file__).resolve().parents[1]


def words(text) -> str:
    return re.sub(r"\W+", "", str(text))


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    return [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_every_chapter_is_in_the_table_of_contents():
    assert book.chapters()
    chapter_files = [f for f in toc_files() if f.startswith("chapters/") and f != "chapters/results"]
    assert [f"chapters/{name}" for name in book.chapters()] == chapter_files
    assert toc_files()[-2:] == ["chapters/results", "bibliography"]


def test_every_chapter_has_exercises_with_checked_solutions():
    """At least three per chapter, each solution a hidden cell whose assertion the chapter's
    execution checks (the quick run below, and every build)."""
    for name in book.chapters():
        text = book.source(name).read_text()
        assert len(re.findall(r"^# ### Exercise", text, re.M)) >= 3, name
        solutions = text.split('# %% tags=["hide-cell", "solution"]')[1:]
        assert len(solutions) >= 3, name
        for solution in solutions:
            code = solution.split("\n# %%", 1)[0]
            assert re.search(r"^\s*assert ", code, re.M), f"{name}: a solution asserts nothing"
        assert f"(claims-{name})=" in text, f"{name} lacks the label of its claims table"


def test_parameters_parse_to_python_values():
    assert book.parse_parameters(["quick=True", "seed=3", "model_name=gpt2", "lr=1e-3"]) == {
        "quick": True, "seed": 3, "model_name": "gpt2", "lr": 1e-3,
    }  # fmt: skip
    with pytest.raises(book.ChapterError, match="name=value"):
        book.parse_parameters(["quick"])


def test_unknown_chapter_lists_the_valid_ones(capsys):
    assert book.main(["run", "nope"]) == 1
    err = capsys.readouterr().err
    assert "unknown chapter 'nope'" in err and "outliers" in err


def test_every_chapter_declares_the_standard_parameters():
    for name in book.chapters():
        text = book.source(name).read_text()
        cell = text.split('# %% tags=["parameters"]', 1)[1].split("# %%", 1)[0]
        for parameter in ("model_name", "seed", "quick"):
            assert re.search(rf"^{parameter} = ", cell, re.M), f"{name} lacks parameter {parameter}"


def test_a_failing_chapter_names_itself_and_its_notebook(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "01_broken.py").write_text('# %%\nraise RuntimeError("on purpose")\n')
    with pytest.raises(book.ChapterError) as error:
        book.run_chapter("broken", out_dir=tmp_path / "out", progress=False, notebooks=notebooks)
    message = str(error.value)
    assert (
        "'broken'" in message
        and "on purpose" in message
        and str(tmp_path / "out" / "broken.ipynb") in message
    )


@pytest.mark.slow
def test_quick_chapters_execute_and_the_book_builds_offline(quick_book):
    html = quick_book / "_build" / "html"
    for name in book.chapters():
        assert (quick_book / "chapters" / f"{name}.json").exists()
    page = (html / "chapters" / "outliers.html").read_text()
    images = re.findall(r'<img[^>]+src="([^"]+)"', page)
    assert len(images) >= 4 and all((html / "chapters" / src).resolve().exists() for src in images)
    assert "paper" in page and "verdict" in page
    for path in html.rglob("*.html"):
        text = path.read_text()
        external = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', text)
        assert not external, f"{path.name} loads {external}"
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()


@pytest.mark.slow
def test_every_chapter_opens_with_how_to_rerun_it_and_ends_with_its_claims(quick_book):
    html = quick_book / "_build" / "html" / "chapters"
    for name in book.chapters():
        results = json.loads((quick_book / "chapters" / f"{name}.json").read_text())
        page = (html / f"{name}.html").read_text()
        box = page[: page.index('id="claims-' + name)]
        # the opening box holds the exact command and the measured times, glued from this run
        assert f"CH={name}" in re.sub(r"<[^>]+>", "", box.replace('<span class="pre">', "")), name
        assert results["rerun"]["command"].startswith(f"make chapter CH={name}")
        assert results["rerun"]["cached_seconds"] > 0 and "environment" in results
        # the claims table is the chapter's last section
        article = page[page.index("<article") : page.index("</article>")]
        last_section = article.rsplit("<section", 1)[1]
        assert "verdict" in last_section and "Exercise" not in last_section, name


@pytest.mark.slow
def test_solutions_are_hidden_behind_a_toggle(quick_book):
    for name in book.chapters():
        page = (quick_book / "_build" / "html" / "chapters" / f"{name}.html").read_text()
        hidden = page.count('class="cell tag_hide-cell tag_solution')
        assert hidden >= 3, f"{name}: {hidden} hidden solutions"
        assert page.count("<details") >= hidden


@pytest.mark.slow
def test_results_page_has_every_claim_and_links_to_its_chapter(quick_book):
    page = (quick_book / "_build" / "html" / "chapters" / "results.html").read_text()
    n_claims, text = 0, words(html_unescape(re.sub(r"<[^>]+>", "", page)))
    for name in book.chapters():
        claims = json.loads((quick_book / "chapters" / f"{name}.json").read_text())["claims"]
        n_claims += len(claims)
        assert f'href="{name}.html#claims-{name}"' in page, name
        for row in claims:  # compared without markup and punctuation, which Sphinx typesets
            assert words(row["ours"]) in text, (name, row["ours"])
    assert page.count("<tr") - page.count("<thead") >= n_claims
    assert "torch" in page and "sha256" in page


@pytest.mark.slow
def test_bibliography_lists_the_three_papers(quick_book):
    page = (quick_book / "_build" / "html" / "bibliography.html").read_text()
    for title in ("Privileged bases", "A primer on the inner workings", "Transformer layers as painters"):
        assert title.lower() in page.lower(), title


@pytest.mark.slow
@pytest.mark.parametrize(
    "path", sorted((ROOT / "notebooks" / "drafts").glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem
)
def test_draft_chapters_run_in_quick_mode(tmp_path, path):
    name = path.stem.split("_", 1)[1]
    out = book.run_chapter(name, {"quick": True}, out_dir=tmp_path, progress=False, notebooks=path.parent)
    assert (tmp_path / f"{name}.json").exists() and out.exists()


def test_verdict_words():
    assert book.verdict(True) == "reproduced" and book.verdict(False, partly=True) == "partly"
    assert book.verdict(False) == "not reproduced" and book.verdict(False, prediction=True) == "not supported"
