"""Is an executed chapter still what its source says? Fingerprints, status, and registration.

A chapter's fingerprint hashes its code cells (with the tags that matter to execution), its
criteria file and its non-default parameters; an executed chapter is *fresh* while its recorded
fingerprint matches. ``registration`` reads from the repository's history whether a claim's
criterion was committed before the results that judge it."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from resid.runtime import provenance
from resid.runtime.paths import CHAPTERS_OUT, ROOT
from resid.train import records

from .presentation import PRESENTATION_TAGS, narrative_edited
from .sources import NOTEBOOKS, ChapterError, source_notebook


def _computing_tags(cell) -> list[str]:
    return [t for t in cell.metadata.get("tags", []) if t not in PRESENTATION_TAGS]


def fingerprint(name: str, parameters: dict, notebooks: Path = NOTEBOOKS) -> dict:
    """What a chapter computes (a hash of its executed code cells, with the tags that matter to
    execution, and of its pre-registered criteria in ``criteria/<name>.toml``) and is told (its
    non-default parameters). Its markdown, its presentation tags and its exercises' starter
    cells are left out, as jupyter-cache leaves out everything but code: such an edit is copied
    into the executed chapter by ``refresh_narrative``, without executing anything. So are its
    quick-run cells, but for a quick run: a run at the defaults never executes them."""
    notebook = source_notebook(name, notebooks, quick=bool(parameters.get("quick")))
    cells = [c for c in notebook.cells if c.cell_type == "code"]
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


def training_needed(rerun: dict) -> str:
    """What re-executing a chapter trains, from the runs its last execution read: none where each
    has a run record (or a checkpoint in this machine's cache), else which and for how long. A
    code change may of course ask for other runs."""
    from resid.runtime.paths import cache_dir

    runs = rerun.get("training_runs")
    if runs is None:
        return "which training runs it reads is recorded from its next execution on"
    if not runs:
        return "it trains nothing"

    read = rerun.get("measurements_read", {})  # recorded by executions from 2026-12-06 on

    def kept(key: str) -> bool:
        if key.startswith("lens-"):  # a tuned lens's record keeps no translators: only the cache has them
            return (cache_dir() / "lenses" / f"{key}.pt").exists()
        if (cache_dir() / "runs" / f"{key}.pt").exists():
            return True  # the weights are here: a missing measurement is computed without training
        path = records.json_path(key)
        if not path.exists():
            return False
        # a record rewritten by another chapter's retraining may have lost what this one read
        held = json.loads(path.read_text()).get("measurements", {}) if read.get(key) else {}
        return all(records.unqualified(name) in held for name in read.get(key, []))

    missing = {key: seconds for key, seconds in runs.items() if not kept(key)}
    if not missing:
        return f"re-executing reads its {len(runs)} training runs from their records, training nothing"
    total = sum(seconds or 0.0 for seconds in missing.values())
    keys = ", ".join(sorted(missing)[:4]) + (", …" if len(missing) > 4 else "")
    return (f"re-executing trains {len(missing)} of its {len(runs)} runs (≈ {provenance.duration(total)} "
            f"as recorded): {keys}")  # fmt: skip
