"""The chapters' sources: where they are and what they are called.

A chapter is a percent-format script ``notebooks/NN_<name>.py``; its number orders the book
and numbers its exercises. The book runner (``book.py``) and the course page (``course.py``)
both read these names, so they live below both.
"""

from __future__ import annotations

from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"


class ChapterError(RuntimeError):
    pass


def chapters(notebooks: Path = NOTEBOOKS) -> list[str]:
    """Chapter names in book order (the sources are numbered: ``01_outliers.py`` -> ``outliers``)."""
    return [path.stem.split("_", 1)[1] for path in sorted(notebooks.glob("[0-9][0-9]_*.py"))]


def source(name: str, notebooks: Path = NOTEBOOKS) -> Path:
    """The source of chapter ``name``; ``ChapterError`` (naming the chapters) if there is none."""
    matches = sorted(notebooks.glob(f"[0-9][0-9]_{name}.py"))
    if not matches:
        raise ChapterError(f"unknown chapter {name!r}; chapters: {', '.join(chapters(notebooks))}")
    return matches[0]


# A code cell tagged "quick" holds the CI's quick-run sizes: it runs in a quick run only. A run at
# the chapter's defaults never sees it, so it is not part of what the committed chapter computed
# (nor of its fingerprint): the quick run can be made smaller without executing the chapter again.
QUICK_TAG = "quick"


def source_notebook(name: str, notebooks: Path, for_students: bool = False, quick: bool = False):
    """A chapter's percent-format source as a notebook with a kernel to run it: the chapter
    (its exercises' starter cells left out; they are the student's, and never run here), or
    with ``for_students`` the handout's cells (the solutions left out, the starters kept). Cells
    tagged "quick" are kept for a ``quick`` run only."""
    import jupytext

    notebook = jupytext.read(source(name, notebooks))
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    left_out = {"solution" if for_students else "starter"} | (set() if quick else {QUICK_TAG})
    notebook.cells = [c for c in notebook.cells if not left_out & set(c.metadata.get("tags", []))]
    return notebook
