"""Execute the book's chapters with papermill.

A chapter's source is a percent-format script ``notebooks/<name>.py`` (readable diffs, ruff-able);
it is converted to a notebook, executed with its parameters, and written to
``book/chapters/<name>.ipynb``, which Jupyter Book renders without re-executing.

    python -m resid.book list
    python -m resid.book run outliers -p quick=True -p model=gpt2
    python -m resid.book all
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


def save_results(results: dict) -> None:
    """Write a chapter's key numbers next to its executed notebook, as ``<chapter>.json``
    (the runner executes chapters in their output directory), and report its run time."""
    import json

    with open(f"{results['chapter']}.json", "w") as f:
        json.dump(results, f, indent=1)
    print(f"chapter computed in {results['seconds']:.0f} s")


def verdict(ok: bool, partly: bool = False, prediction: bool = False) -> str:
    """The last column of every paper-vs-ours table, computed from the chapter's numbers.

    ``prediction=True`` words it for a hypothesis the paper proposed but did not test.
    """
    if prediction:
        return "supported" if ok else ("partly" if partly else "not supported")
    return "reproduced" if ok else ("partly" if partly else "not reproduced")


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
