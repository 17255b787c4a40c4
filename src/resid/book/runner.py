"""Execute the book's chapters with papermill, and the command line that does it.

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

The other jobs of the book's machinery live beside this module, each in its own: a chapter's
parameters (``parameters``), what a reader sees and what changes without executing
(``presentation``), fingerprints, status and registration (``freshness``), handouts and the
wheel (``handouts``), the HTML build and the results page (``pages``). ``resid.book`` gathers
their public names.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from unittest.mock import patch

from resid.runtime import provenance
from resid.runtime.paths import CHAPTERS_OUT, HANDOUTS_OUT, ROOT
from resid.runtime.progress import ENV as PROGRESS_ENV
from resid.stats import claims
from resid.train import records

from .freshness import (
    ChapterStatus,
    chapter_status,
    fingerprint,
    package_commit,
    registration,
    training_needed,
)
from .handouts import WHEEL_FOLDER, build_wheel, handout_package, lab_copies, measure_handouts, write_handouts
from .pages import build_html, results_page, write_readme_table
from .parameters import (
    parse_parameters,
    precision_note,
    validate_parameters,
)
from .presentation import present, refresh_narrative
from .sources import NOTEBOOKS, ChapterError, chapters, source, source_notebook

EXECUTION_ENV = "RESID_EXECUTION"  # the runner's record of this execution, read by save_results


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
    notebook = source_notebook(name, notebooks, quick=bool(parameters.get("quick")))
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
    present(executed, record)
    for produced in scratch.iterdir():
        shutil.move(produced, out_dir / produced.name)
    scratch.rmdir()
    return output


def run_chapters(
    runs: dict[str, dict], out_dir: Path = CHAPTERS_OUT, workers: int = 1, notebooks: Path = NOTEBOOKS
) -> dict[str, float]:
    """Execute several chapters (name -> parameters), ``workers`` at a time, each in a process of
    its own whose kernel gets an equal share of the cores, so that no two chapters fight over one;
    the longest first (by their committed executions' times), so that the last to start is a
    short one. Returns each chapter's seconds; a failure raises its ``ChapterError``."""
    if workers <= 1 or len(runs) <= 1:
        return {name: _timed_run(name, parameters, out_dir, notebooks) for name, parameters in runs.items()}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    def committed_seconds(name: str) -> float:
        path = CHAPTERS_OUT / f"{name}.ipynb"
        metadata = json.loads(path.read_text()).get("metadata", {}) if path.exists() else {}
        return metadata.get("papermill", {}).get("duration") or 0.0

    threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited torch state
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_share_cores, initargs=(threads,)
    ) as pool:
        futures = {name: pool.submit(_timed_run, name, runs[name], out_dir, notebooks)
                   for name in sorted(runs, key=committed_seconds, reverse=True)}  # fmt: skip
        return {name: futures[name].result() for name in runs}


def _share_cores(threads: int) -> None:
    # read by the kernel this process starts, whose torch takes its thread count from it
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)


def _timed_run(name: str, parameters: dict, out_dir: Path, notebooks: Path) -> float:
    start = time.perf_counter()
    run_chapter(name, parameters, out_dir=out_dir, progress=False, notebooks=notebooks)
    return time.perf_counter() - start


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


# How the opening box names the rows it does not count (claims.not_counted), one and several.
APART_WORDS = {
    "positive control": ("is a positive control", "are positive controls"),
    "trained on its metric": ("is judged on the metric its method was trained on",
                              "are judged on the metric their method was trained on"),
    claims.NOT_MEASURED: ("could not be measured", "could not be measured"),
}  # fmt: skip


def verdict_summary(
    claim_rows: list[dict],
    headline: str = "",
    repeats: dict | None = None,
    registered: dict | None = None,
    apart: dict | None = None,
) -> str:
    """The sentence that opens a chapter's opening box: ``headline`` (the chapter's result in its
    own computed words, if it gives one), then how many claims it judged and their verdicts, and
    with ``registered`` (claim id -> its registration, ``freshness.registration``) the verdicts of
    the confirmatory ones apart. A row that cannot count (``claims.not_counted``: it repeats
    another's measurement, per the chapter's ``repeats``; it is a positive control or judged on
    its own training metric, per its ``apart``; or it could not be measured) is named apart and
    not counted, as on the results page."""
    reasons = claims.not_counted(claim_rows, repeats, apart)
    counted = [row for row in claim_rows if row.get("id") not in reasons]
    order = [*claims.VERDICTS, *claims.PREDICTION_VERDICTS]

    def tally(rows: list[dict]) -> str:
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
        return ", ".join(f"{counts[v]} {v}" for v in dict.fromkeys(order) if counts.get(v))

    judged = f"{len(counted)} claims judged against their criteria: {tally(counted)}." if counted else ""
    known = {k: v for k, v in (registered or {}).items() if v != "unknown"}  # no history: not said
    if counted and known:
        confirmatory = [row for row in counted if known.get(row.get("id")) == "confirmatory"]
        judged += (f" Confirmatory (criterion committed before any result): {tally(confirmatory)}."
                   if confirmatory else " None of them is confirmatory.")  # fmt: skip
    kinds = [reason if reason in APART_WORDS else "repeat" for reason in reasons.values()]
    if n := kinds.count("repeat"):
        judged += f" {n} more {'repeats' if n == 1 else 'repeat'} another claim's number, not counted."
    for kind, (one, several) in APART_WORDS.items():
        if n := kinds.count(kind):
            judged += f" {n} more {one if n == 1 else several}, not counted."
    return " ".join(part for part in (headline.strip(), judged) if part)


def registrations(chapter: str, claim_rows: list[dict]) -> dict[str, str]:
    """Each claim's registration (confirmatory, exploratory, pending, unknown), by its id."""
    return {row["id"]: registration(chapter, row["id"])["registration"] for row in claim_rows if "id" in row}


RESULT_GLUE = "chapter_result"
RESULT_MIME = "application/papermill.record/text/markdown"


def refresh_result(name: str, out_dir: Path = CHAPTERS_OUT, repeats: dict | None = None) -> bool:
    """Re-state an executed chapter's result (the ``chapter_result`` its opening box shows) from
    its results JSON and today's ``notebooks/repeats.toml``, so that its verdict counts never
    disagree with the results page when a claim is named a repeat after the chapter ran. The
    headline is the one the chapter computed (kept in its JSON, or for a chapter executed before
    that, read off the glued text). Executes nothing; True if the notebook changed."""
    import re

    import nbformat

    path, results_path = out_dir / f"{name}.ipynb", out_dir / f"{name}.json"
    if not (path.exists() and results_path.exists()):
        return False
    results = json.loads(results_path.read_text())
    repeats = claims.load_repeats().get(name, {}) if repeats is None else repeats
    apart = claims.load_apart().get(name, {})
    notebook = nbformat.read(path, as_version=4)
    changed = False
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            glued = output.get("metadata", {}).get("scrapbook", {}).get("name") == RESULT_GLUE
            if not glued or RESULT_MIME not in output.get("data", {}):
                continue
            text = output["data"][RESULT_MIME]
            headline = results.get("headline")
            if headline is None:  # executed before the JSON kept it: the text before its counts
                counts = re.search(r"\d+ claims? judged against their criteria:", text)
                headline = text[: counts.start()] if counts else text
            rows = results.get("claims", [])
            restated = verdict_summary(rows, headline, repeats, registrations(name, rows), apart)
            if restated != text:
                output["data"][RESULT_MIME] = restated
                changed = True
    if changed:
        nbformat.write(notebook, path)
    return changed


def save_results(results: dict, rerun: dict | None = None, headline: str = "") -> None:
    """Write a chapter's key numbers next to its executed notebook, as ``<chapter>.json`` (the
    runner executes chapters in their output directory), with what a reader needs to rerun it.

    ``rerun`` holds the parameters that matter (model, seeds, size) with this execution's values:
    they make the exact ``make chapter`` command. The command and the chapter's cached and cold
    run times are glued for the chapter's opening box (``{glue:text}`rerun_cached```), and so is
    its result (``{glue:md}`chapter_result```): ``headline``, a sentence or two the chapter
    computes, then its verdict counts (``verdict_summary``).
    """
    from IPython.display import Markdown
    from myst_nb import glue

    times = provenance.rerun_times(results["seconds"])
    rerun = ({"quick": True} if results.get("quick") else {}) | (rerun or {})
    command = rerun_command(results["chapter"], rerun)
    execution = json.loads(os.environ.get(EXECUTION_ENV, "null"))  # set by run_chapter
    results = results | {"rerun": {"command": command, "parameters": rerun, **times}, "headline": headline,
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
    repeats = claims.load_repeats().get(results["chapter"], {})  # shown in the tables, not counted
    rows = results.get("claims", [])
    apart = claims.load_apart().get(results["chapter"], {})
    result = verdict_summary(rows, headline, repeats, registrations(results["chapter"], rows), apart)
    glue(RESULT_GLUE, Markdown(result), display=False)
    print(f"chapter computed in {results['seconds']:.0f} s")


def rerun_command(chapter: str, parameters: dict) -> str:
    """``make chapter CH=rmsnorm P="seeds=(0,1,2) quick=False"``: values without spaces, since
    ``make`` splits ``P`` on them."""
    pairs = [f"{k}={v if isinstance(v, str) else repr(v).replace(' ', '')}" for k, v in parameters.items()]
    return f"make chapter CH={chapter}" + (f' P="{" ".join(pairs)}"' if pairs else "")


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m resid.book", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the chapters")
    sub.add_parser("status", help="each chapter: fresh, stale or missing, executed when, with which commit")
    update = sub.add_parser("update", help="execute the missing and stale chapters at their defaults")
    update.add_argument("--no-execute", action="store_true", help="fail, executing nothing, if one is stale")
    sub.add_parser("results", help="write the results and course pages, the README table and the handouts")
    handouts = sub.add_parser("handouts", help="write student notebooks without the solutions")
    handouts.add_argument("--out", type=Path, default=HANDOUTS_OUT)
    memory = sub.add_parser("memory", help="run handouts to their last cell; file their time and peak memory")
    memory.add_argument("chapters", nargs="*", help="the handouts to run (default: every one)")
    memory.add_argument("--default", action="store_true", help="at the chapters' defaults, not quick")
    lab = sub.add_parser("lab", help="copy the handouts missing from lab/, never over a student's copy")
    lab.add_argument("--force", action="store_true", help="write every one afresh; replaced copies kept")
    wheel = sub.add_parser("wheel", help="build resid as a wheel in dist/, with its criteria and run records")
    wheel.add_argument("--site", type=Path, metavar="HTML", help="build it into HTML/wheel/ of a built site")
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
            if (ROOT / "README.md").exists():  # a clone's: an installed wheel has none
                print(f"[resid] README's chapter table -> {write_readme_table()}")
                # the handouts carry the executed chapters' computed values (their results among them)
                print(f"[resid] handouts -> {HANDOUTS_OUT / 'chapters'} ({len(write_handouts())} written)")
            return 0
        if args.command == "wheel":
            built = build_wheel(args.site / WHEEL_FOLDER if args.site else ROOT / "dist")
            print(f"[resid] wheel -> {built}")
            if args.site and (url := handout_package()):
                print(f"[resid] the handouts install it from {url}")
            return 0
        if args.command == "html":
            print(f"[resid] open {build_html() / 'index.html'} (each chapter's download is its handout)")
            return 0
        if args.command == "memory":
            for name in args.chapters:
                source(name)  # an unknown name fails here, before anything runs
            print(f"[resid] -> {measure_handouts(args.chapters or chapters(), quick=not args.default)}")
            return 0
        if args.command == "lab":
            done = lab_copies(force=args.force)
            for path, kept in done["replaced"]:
                print(f"[resid] replaced {path}; your copy is kept as {kept}")
            new = len(done["written"]) - len(done["replaced"])
            print(f"[resid] lab/: {new} handouts copied, {len(done['replaced'])} replaced, "
                  f"{len(done['kept'])} of yours kept (FORCE=1 writes them afresh)")  # fmt: skip
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
                if row.state == "fresh" and refresh_result(row.name):
                    print(f"[resid] chapter {row.name}: result re-stated from its JSON and what is counted")
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
