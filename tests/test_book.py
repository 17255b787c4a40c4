"""The chapter pipeline end to end: papermill executes a chapter, Jupyter Book renders it."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from resid import book

ROOT = Path(__file__).resolve().parents[1]


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    return [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_every_chapter_is_in_the_table_of_contents():
    assert book.chapters()
    assert [f"chapters/{name}" for name in book.chapters()] == toc_files()


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
def test_quick_chapters_execute_and_the_book_builds_offline(tmp_path):
    site = tmp_path / "book"
    shutil.copytree(ROOT / "book", site, ignore=shutil.ignore_patterns("_build", "chapters"))
    for name in book.chapters():
        out = book.run_chapter(name, {"quick": True}, out_dir=site / "chapters", progress=False)
        assert out.exists() and (site / "chapters" / f"{name}.json").exists()
    result = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", str(site), "--warningiserror"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    html = site / "_build" / "html"
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
