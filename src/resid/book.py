"""Execute the book's chapters with papermill.

A chapter's source is a percent-format script ``notebooks/<name>.py`` (readable diffs, ruff-able);
it is converted to a notebook, executed with its parameters, and written to
``book/chapters/<name>.ipynb``, which Jupyter Book renders without re-executing.

    python -m resid.book list
    python -m resid.book run outliers -p quick=True -p model=gpt2
    python -m resid.book all
    python -m resid.book results   # the results overview page, from the chapters' JSON files
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
CHAPTERS_OUT = ROOT / "book" / "chapters"


class ChapterError(RuntimeError):
    pass


def chapters(notebooks: Path = NOTEBOOKS) -> list[str]:
    """Chapter names in book order (the sources are numbered: ``01_outliers.py`` -> ``outliers``)."""
    return [path.stem.split("_", 1)[1] for path in sorted(notebooks.glob("[0-9][0-9]_*.py"))]


def source(name: str, notebooks: Path = NOTEBOOKS) -> Path:
    matches = sorted(notebooks.glob(f"[0-9][0-9]_{name}.py"))
    if not matches:
        raise ChapterError(f"unknown chapter {name!r}; chapters: {', '.join(chapters(notebooks))}")
    return matches[0]


def run_chapter(
    name: str,
    parameters: dict | None = None,
    out_dir: Path = CHAPTERS_OUT,
    progress: bool = True,
    notebooks: Path = NOTEBOOKS,
) -> Path:
    """Execute one chapter into ``out_dir/<name>.ipynb``; raise ``ChapterError`` if a cell fails.

    The notebook runs with ``out_dir`` as its working directory, so whatever it writes (its
    results JSON) lands next to it.
    """
    import jupytext
    import papermill

    notebook = jupytext.read(source(name, notebooks))
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = out_dir / f".{name}.source.ipynb"
    jupytext.write(notebook, staged, fmt="ipynb")
    output = out_dir / f"{name}.ipynb"
    try:
        papermill.execute_notebook(
            str(staged), str(output), parameters=parameters or {}, cwd=str(out_dir),
            kernel_name="python3", progress_bar=progress,
        )  # fmt: skip
    except papermill.PapermillExecutionError as error:
        raise ChapterError(
            f"chapter {name!r} failed in cell {error.exec_count}: {error.ename}: {error.evalue}. "
            f"The executed notebook, with the traceback, is at {output}"
        ) from None
    finally:
        staged.unlink(missing_ok=True)
    return output


def save_results(results: dict, rerun: dict | None = None) -> None:
    """Write a chapter's key numbers next to its executed notebook, as ``<chapter>.json`` (the
    runner executes chapters in their output directory), with what a reader needs to rerun it.

    ``rerun`` holds the parameters that matter (model, seeds, size) with this execution's values:
    they make the exact ``make chapter`` command. The command and the chapter's cached and cold
    run times are glued for the chapter's opening box (``{glue:text}`rerun_cached```).
    """
    import json

    from IPython.display import Markdown
    from myst_nb import glue

    from . import provenance

    times = provenance.rerun_times(results["seconds"])
    rerun = ({"quick": True} if results.get("quick") else {}) | (rerun or {})
    command = rerun_command(results["chapter"], rerun)
    results = results | {"rerun": {"command": command, "parameters": rerun, **times},
                         "environment": provenance.environment()}  # fmt: skip
    with open(f"{results['chapter']}.json", "w") as f:
        json.dump(results, f, indent=1, default=str)
    approx = "≈ " if times["cold_estimated"] else ""
    glue("rerun_command", Markdown(f"`{command}`"), display=False)
    glue("rerun_cached", provenance.duration(times["cached_seconds"]), display=False)
    glue("rerun_cold", approx + provenance.duration(times["cold_seconds"]), display=False)
    print(f"chapter computed in {results['seconds']:.0f} s")


def rerun_command(chapter: str, parameters: dict) -> str:
    """``make chapter CH=rmsnorm P="seeds=(0,1,2) quick=False"``: values without spaces, since
    ``make`` splits ``P`` on them."""
    pairs = [f"{k}={v if isinstance(v, str) else repr(v).replace(' ', '')}" for k, v in parameters.items()]
    return f"make chapter CH={chapter}" + (f' P="{" ".join(pairs)}"' if pairs else "")


def verdict(ok: bool, partly: bool = False, prediction: bool = False) -> str:
    """The last column of every paper-vs-ours table, computed from the chapter's numbers.

    ``prediction=True`` words it for a hypothesis the paper proposed but did not test.
    """
    if prediction:
        return "supported" if ok else ("partly" if partly else "not supported")
    return "reproduced" if ok else ("partly" if partly else "not reproduced")


def results_page(out_dir: Path = CHAPTERS_OUT, toc: Path = ROOT / "book" / "_toc.yml") -> Path:
    """Write ``results.md``, the book's results overview, from the chapters' ``<chapter>.json``.

    One table per part of the book (its caption from the table of contents), a row per claim with
    the paper's figure, ours and the verdict, each linking to the chapter's own claims table
    (label ``claims-<chapter>``); then a reproducibility note per chapter.
    """
    import json

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
    notes, counts = [], {}
    for part in parts:
        names = [c["file"].removeprefix("chapters/") for c in part["chapters"]]
        names = [n for n in names if n in known]
        if not names:
            continue
        lines += ["", f"## {part['caption']}", "", "| chapter | claim | paper | ours | verdict |",
                  "| --- | --- | --- | --- | --- |"]  # fmt: skip
        for name in names:
            path = out_dir / f"{name}.json"
            if not path.exists():
                lines.append(f"| {name} | *not executed yet: `make chapter CH={name}`* | | | |")
                continue
            results = json.loads(path.read_text())
            link = f"{{ref}}`{name} <claims-{name}>`" + (" (quick run)" if results.get("quick") else "")
            for row in results.get("claims", []):
                claim = row.get("claim") or row.get("prediction") or row.get("question")
                paper = row.get("paper") or row.get("primer") or row.get("source") or ""
                counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
                lines.append(f"| {link} | {cell(claim)} | {cell(paper)} | {cell(row['ours'])} | "
                             f"**{cell(row['verdict'])}** |")  # fmt: skip
            notes.append(_reproducibility_note(name, results))
    summary = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    lines[3:3] = ["", f"Verdicts over all chapters: {summary}." if counts else "No chapter has run yet."]
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
    from .provenance import duration

    rerun, env = results.get("rerun", {}), results.get("environment", {})
    if not rerun:
        return f"- **{name}**: executed before reproducibility was recorded; rerun it."
    approx = "≈ " if rerun.get("cold_estimated") else ""
    inputs = "; ".join(f"{k} `{v}`" for k, v in env.get("inputs", {}).items()) or "none read from disk"
    return (
        f"- **{name}** — `{rerun['command']}`; {duration(rerun['cached_seconds'])} cached, "
        f"{approx}{duration(rerun['cold_seconds'])} cold. Executed {env.get('date', '?')} with Python "
        f"{env.get('python')}, torch {env.get('torch')}, transformers {env.get('transformers')} on "
        f"{env.get('machine')} ({env.get('threads')} threads). Inputs: {inputs}."
    )


def parse_parameters(pairs: list[str]) -> dict:
    """``["quick=True", "model=gpt2"]`` -> ``{"quick": True, "model": "gpt2"}``."""
    parameters = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ChapterError(f"parameter {pair!r} is not of the form name=value")
        try:
            parameters[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parameters[key] = value  # a bare string such as model=gpt2
    return parameters


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m resid.book", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the chapters")
    sub.add_parser("results", help="write the results overview page from the chapters' JSON files")
    run = sub.add_parser("run", help="execute one chapter")
    run.add_argument("chapter")
    run.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    everything = sub.add_parser("all", help="execute every chapter")
    everything.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            print("\n".join(chapters()))
            return 0
        if args.command == "results":
            print(f"[resid] results overview -> {results_page()}")
            return 0
        names = [args.chapter] if args.command == "run" else chapters()
        parameters = parse_parameters(args.param)
        for name in names:
            source(name)  # an unknown name fails before anything runs
        for name in names:
            start = time.time()
            print(f"[resid] chapter {name}: running", flush=True)
            output = run_chapter(name, parameters)
            print(f"[resid] chapter {name}: done in {time.time() - start:.0f} s -> {output}", flush=True)
    except ChapterError as error:
        print(f"[resid] error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
