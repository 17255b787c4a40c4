"""What a reader sees of an executed chapter, and what can change without executing it.

Presentation tags collapse code (parameters, setup, plots, computed prose, the results' record)
or fold outputs (the check tables, which answer exercises); alt text reaches a figure's image.
A chapter's markdown, its presentation and its alt text are narrative: ``refresh_narrative``
copies an edit of them into the executed notebook, outputs untouched, and the fingerprint leaves
them out."""

from __future__ import annotations

import copy
from pathlib import Path

from resid.runtime.paths import CHAPTERS_OUT

from .sources import NOTEBOOKS, ChapterError, source_notebook

# Tags that change how a cell is shown, never what it computes: Jupyter Book's, and the book's
# own "plot", "prose" and "record" (code collapsed: a figure, a conclusion written from computed
# numbers, the cell that files the chapter's results and headline) and "checks" (its output
# folded: it answers exercises).
PRESENTATION_TAGS = {"hide-input", "hide-output", "hide-cell", "remove-input", "remove-output", "remove-cell",
                     "full-width", "margin", "scroll-output", "output_scroll", "plot", "prose",
                     "checks", "record"}  # fmt: skip


# Cells a reader need not read first: collapsed behind a toggle that says what they hold.
COLLAPSED = {
    "parameters": "Show the parameters",
    "injected-parameters": "Show the parameters this execution was given",
    "setup": "Show the setup code",
    "plot": "Show the plotting code",
    "prose": "Show how this paragraph is computed",  # a computed conclusion, read as text
    "record": "Show how the results and the headline are recorded",  # ledger.results, book.save_results
}


# Outputs folded: a check table answers some of the exercises before them.
FOLDED = {"checks": "Show the checks (they answer some exercises: try those first)"}


def present_cell(cell, tags: list[str], alt: str | None = None) -> None:
    """Give an executed code cell the source's ``tags``, the toggles they ask for, and the
    source's ``alt`` text (cell metadata ``alt="..."``) for the figures it draws."""
    tags = list(tags)
    cell.metadata.pop("mystnb", None)
    cell.metadata.pop("alt", None)
    for tag, prompt in COLLAPSED.items():
        if tag in tags:
            tags += [] if "hide-input" in tags else ["hide-input"]
            cell.metadata["mystnb"] = {"code_prompt_show": prompt, "code_prompt_hide": "Hide the code"}
            break
    for tag, prompt in FOLDED.items():
        if tag in tags:
            tags += [] if "hide-output" in tags else ["hide-output"]
            cell.metadata["mystnb"] = {"code_prompt_show": prompt, "code_prompt_hide": "Hide the checks"}
    if alt:  # what a reader who cannot see the figure is told it shows (myst-nb's image option)
        cell.metadata["alt"] = alt
        cell.metadata.setdefault("mystnb", {})["image"] = {"alt": alt}
    if tags or "tags" in cell.metadata:
        cell.metadata["tags"] = tags


def present(path: Path, record: dict) -> None:
    """Collapse the parameters, setup and plotting cells (their outputs stay visible), fold the
    check tables' outputs, and store the execution record in the notebook's metadata."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            present_cell(cell, cell.metadata.get("tags", []), cell.metadata.get("alt"))
    notebook.metadata["resid"] = record
    nbformat.write(notebook, path)


def merged_narrative(name: str, out_dir: Path, notebooks: Path):
    """The executed notebook with the markdown of the chapter's source: every executed code cell
    (outputs and all) kept in place, the markdown between them taken from the source. Cells are
    matched segment by segment (the markdown before each code cell), reusing the executed
    markdown cells' ids and metadata where they pair up."""
    import nbformat

    executed = nbformat.read(out_dir / f"{name}.ipynb", as_version=4)
    quick = bool(executed.metadata.get("resid", {}).get("parameters", {}).get("quick"))
    source_cells = source_notebook(name, notebooks, quick=quick).cells

    def segments(cells) -> tuple[list[list], list]:
        parts, code = [[]], []
        for cell in cells:
            if cell.cell_type == "code":
                code.append(cell)
                parts.append([])
            else:
                parts[-1].append(cell)
        return parts, code

    old_parts, old_code = segments(c for c in executed.cells
                                   if "injected-parameters" not in c.metadata.get("tags", []))  # fmt: skip
    new_parts, new_code = segments(source_cells)
    if [c.source for c in old_code] != [c.source for c in new_code]:
        raise ChapterError(f"chapter {name!r}: its code changed since it was executed; execute it")
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    cells = []
    for i, (old, new) in enumerate(zip(old_parts, new_parts, strict=True)):
        for j, cell in enumerate(new):
            if j < len(old) and old[j].cell_type == cell.cell_type:
                cell, text = copy.deepcopy(old[j]), cell.source
                cell.source = text
            cells.append(cell)
        if i < len(old_code):
            code = copy.deepcopy(old_code[i])
            # presentation as the source says
            present_cell(code, new_code[i].metadata.get("tags", []), new_code[i].metadata.get("alt"))
            cells.append(code)
            if "parameters" in old_code[i].metadata.get("tags", []):
                cells += injected
    executed.cells = cells
    return executed


def narrative_edited(name: str, out_dir: Path = CHAPTERS_OUT, notebooks: Path = NOTEBOOKS) -> bool:
    import nbformat

    executed = nbformat.read(out_dir / f"{name}.ipynb", as_version=4)
    return executed.cells != merged_narrative(name, out_dir, notebooks).cells


def refresh_narrative(name: str, out_dir: Path = CHAPTERS_OUT, notebooks: Path = NOTEBOOKS) -> bool:
    """Copy a fresh chapter's markdown from its source into its executed notebook; True if
    anything changed. Its outputs, and so its numbers, are untouched."""
    import nbformat

    if not narrative_edited(name, out_dir, notebooks):
        return False
    nbformat.write(merged_narrative(name, out_dir, notebooks), out_dir / f"{name}.ipynb")
    return True
