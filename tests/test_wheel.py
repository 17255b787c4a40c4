"""resid installs from its wheel into a fresh virtualenv, offline, from the package index the
project installs from, and a handout runs there, outside the repository, up to its first exercise."""

import os
import subprocess
import sys

import nbformat
import pytest

from resid import book


@pytest.mark.slow
def test_a_handout_runs_from_the_wheel_in_a_fresh_virtualenv(tmp_path):
    wheel = book.build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "RESID_RECORDS")}
    install = subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], env=env, capture_output=True,
                             text=True)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]

    notebook = book.handout("adam")  # a trained chapter: it reads the criteria and records in the wheel
    first = next(i for i, c in enumerate(notebook.cells) if "### Exercise" in c.source)
    notebook.cells = notebook.cells[:first]
    work = tmp_path / "elsewhere"
    work.mkdir()
    nbformat.write(notebook, work / "handout.ipynb")
    run = subprocess.run(
        [python, "-m", "papermill", "handout.ipynb", "out.ipynb", "-p", "quick", "True", "-k", "python3",
         "--no-progress-bar"], cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    executed = nbformat.read(work / "out.ipynb", as_version=4)
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert len(code) > 2 and all(c.get("execution_count") for c in code)
    where = subprocess.run(
        [python, "-c", "import resid, resid.claims as c; print(resid.__file__, c.CRITERIA)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert str(venv) in where and "_data" in where, where  # the installed copy, not the repository's
