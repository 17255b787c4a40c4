"""The published book: its HTML build (each chapter's download its handout, the executed chapter
kept for teachers) and the results overview page, written from the chapters' results files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from resid.runtime import provenance
from resid.runtime.paths import CHAPTERS_OUT, HANDOUTS_OUT, ROOT
from resid.stats import claims

from .freshness import registration
from .sources import ChapterError, chapters


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
        # a configuration outside the book folder reads its static files from beside itself: name
        # the book's own, or the pages lose the book's stylesheet
        sphinx_config = config.setdefault("sphinx", {}).setdefault("config", {})
        sphinx_config["html_static_path"] = [str((site / "_static").resolve())]
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
    # Sphinx copies static files only when some page is rebuilt: a stylesheet edited alone would
    # never reach the pages
    shutil.copytree(site / "_static", html / "_static", dirs_exist_ok=True)
    for page in html.rglob("*.html"):
        soft_breaks(page)
    site_notebooks(html, handouts=site / "handouts", out_dir=site / "chapters")
    return html


TABLE = re.compile(r"<table.*?</table>", re.S)


def soft_breaks(page: Path) -> None:
    """Let a table's long identifiers (``gradients_disagree_with_occlusion``) break after their
    underscores (``<wbr>``), so that the table fits the text column without breaking numbers."""

    def in_text(table: re.Match) -> str:
        return re.sub(r">([^<]*)<", lambda text: ">" + re.sub(r"_(?=\w)", "_<wbr>", text[1]) + "<", table[0])

    text = page.read_text()
    broken = TABLE.sub(in_text, text)
    if broken != text:
        page.write_text(broken)


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


def one_line(text: str) -> str:
    """``text`` kept on one line in a table cell (a verdict, a registration): the claim's cell,
    not the verdict's, is the one that wraps."""
    return f'<span class="nowrap">{text}</span>'


AS_CLAIM = {"supported": "reproduced", "not supported": "not reproduced"}  # a prediction's verdicts, counted


def results_page(
    out_dir: Path = CHAPTERS_OUT,
    toc: Path = ROOT / "book" / "_toc.yml",
    repeats: dict | None = None,
    apart: dict | None = None,
) -> Path:
    """Write ``results.md``, the book's results overview, from the chapters' ``<chapter>.json``.

    One table per part of the book (its caption from the table of contents), a row per claim with
    the paper's figure, ours and the verdict, each linking to the chapter's own claims table
    (label ``claims-<chapter>``); then a reproducibility note per chapter. A claim that
    ``repeats`` (by default ``claims.load_repeats()``) lists as repeating another's measurement
    is shown, marked, and not counted, as is a row ``apart`` (by default ``claims.load_apart()``)
    names a positive control or judged on its own training metric, and a row never measured.
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
    repeats = claims.load_repeats() if repeats is None else repeats
    apart = claims.load_apart() if apart is None else apart
    notes, counts, n_checks, by_kind, n_repeats = [], {}, 0, {}, 0
    n_apart: dict[str, int] = {}  # positive controls, rows judged on their training metric, unmeasured
    per_chapter: dict[str, dict] = {}  # chapter -> its verdict counts, confirmatory ones apart
    for part in parts:
        names = [c["file"].removeprefix("chapters/") for c in part["chapters"]]
        names = [n for n in names if n in known]
        if not names:
            continue
        # three columns, so the verdict stays in the text column: the paper's figure, ours and
        # the criterion go on a second, smaller line of the claim's cell
        header = f"| claim | {one_line('verdict')} | {one_line('registered')} |"
        lines += ["", f"## {part['caption']}", "", header, "| --- | --- | --- |"]
        for name in names:
            path = out_dir / f"{name}.json"
            if not path.exists():
                lines.append(f"| {name}: *not executed yet: `make chapter CH={name}`* | | |")
                continue
            results = json.loads(path.read_text())
            link = f"{{ref}}`{name} <claims-{name}>`" + (" (quick run)" if results.get("quick") else "")
            tally = per_chapter.setdefault(link, {"claims": 0, "checks": len(results.get("checks", []))})
            reasons = claims.not_counted(
                results.get("claims", []), repeats.get(name, {}), apart.get(name, {})
            )
            for row in results.get("claims", []):
                kind = registration(name, row["id"])["registration"] if "id" in row else "unknown"
                claim = (f"{link}: {cell(row['claim'])}<br><small>paper: {cell(row['paper'])} · ours: "
                         f"{cell(row['ours'])} · criterion: {cell(row['criterion'])}</small>")  # fmt: skip
                reason = reasons.get(row.get("id", ""))
                if reason:  # shown, never counted: a repeat is counted once, under the claim it repeats
                    if reason.startswith("repeats"):
                        n_repeats += 1
                    else:
                        n_apart[reason] = n_apart.get(reason, 0) + 1
                    verdict = f"{one_line(cell(row['verdict']))} ({reason}: not counted)"
                    lines.append(f"| {claim} | {verdict} | {one_line(kind)} |")
                    continue
                counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
                # a prediction of the book's own is "supported" where a paper's claim is "reproduced"
                verdict = AS_CLAIM.get(row["verdict"], row["verdict"])
                tally["claims"] += 1
                tally[verdict] = tally.get(verdict, 0) + 1
                if kind == "confirmatory":
                    tally["confirmatory"] = tally.get("confirmatory", 0) + 1
                    tally[f"confirmatory {verdict}"] = tally.get(f"confirmatory {verdict}", 0) + 1
                by_kind.setdefault(kind, {}).setdefault(row["verdict"], 0)
                by_kind[kind][row["verdict"]] += 1
                shown = one_line(f"**{cell(row['verdict'])}**")
                lines.append(f"| {claim} | {shown} | {one_line(kind)} |")
            n_checks += len(results.get("checks", []))
            notes.append(_reproducibility_note(name, results))
    summary = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    checks = (f" Besides the claims, {n_checks} checks (identities and sanity properties, asserted where "
              "they are computed) passed; they are listed in their chapters and never counted as "
              "reproductions." if n_checks else "")  # fmt: skip
    if n_repeats:
        checks += (f" {n_repeats} more rows repeat another claim's measurement and are not counted "
                   "(`notebooks/repeats.toml` says why for each).")  # fmt: skip
    if n_apart:
        shown = ", ".join(f"{n} {reason}" for reason, n in sorted(n_apart.items()))
        checks += (f" Nor are these rows, judged as claims but unable to count as a replication: {shown} "
                   "(`notebooks/apart.toml` says why for each; an unmeasured row's estimate is not a "
                   "number).")  # fmt: skip
    kinds = "; ".join(
        f"**{kind}** {sum(v.values())} ("
        + ", ".join(f"{n} {verdict}" for verdict, n in sorted(v.items(), key=lambda kv: -kv[1]))
        + ")"
        for kind, v in sorted(by_kind.items())
    )
    verdict_words = claims.VERDICTS
    # the verdicts by their symbols (explained under the table), so the table fits the text column
    header = (
        "| chapter | claims | "
        + " | ".join(SYMBOLS[v] for v in verdict_words)
        + " | confirmatory (✓) | checks |"
    )
    table = [header, "|" + " --- |" + " ---: |" * (len(verdict_words) + 3)]
    for link, tally in per_chapter.items():
        confirmatory = f"{tally.get('confirmatory', 0)} ({tally.get('confirmatory reproduced', 0)})"
        cells = [tally["claims"], *(tally.get(v, 0) for v in verdict_words), confirmatory, tally["checks"]]
        table.append(f"| {link} | " + " | ".join(map(str, cells)) + " |")
    lines[3:3] = [
        "",
        f"Verdicts over all chapters: {summary}.{checks}" if counts else "No chapter has run yet.",
        "",
        f"By registration: {kinds}." if by_kind else "",
        "",
        *(
            table
            + [
                "",
                "Columns: "
                + ", ".join(f"{SYMBOLS.get(v, v)} {v}" for v in verdict_words)
                + "; confirmatory claims, with how many of them reproduced.",
                "",
            ]
            if per_chapter
            else []
        ),
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


README_MARKS = ("<!-- chapters: written by `python -m resid.book results` -->", "<!-- /chapters -->")
SYMBOLS = {"reproduced": "✓", "partly": "◐", "not reproduced": "✗", "inconclusive": "?"}


def confirmatory_counts(name: str, results: dict, repeats: dict, apart: dict | None = None) -> dict[str, int]:
    """A chapter's confirmatory verdicts, counted as the results page counts them (a prediction's
    "supported" as "reproduced"; a row that cannot count, ``claims.not_counted``, left out)."""
    counts: dict[str, int] = {}
    rows = results.get("claims", [])
    reasons = claims.not_counted(rows, repeats.get(name, {}), (apart or {}).get(name, {}))
    for row in rows:
        if "id" not in row or row["id"] in reasons:
            continue
        if registration(name, row["id"])["registration"] == "confirmatory":
            verdict = AS_CLAIM.get(row["verdict"], row["verdict"])
            counts[verdict] = counts.get(verdict, 0) + 1
    return counts


def readme_table(out_dir: Path = CHAPTERS_OUT, answers: Path = ROOT / "notebooks" / "answers.toml") -> str:
    """The README's chapter table: each chapter's question and answer (``notebooks/answers.toml``)
    beside its confirmatory verdicts, counted from its JSON and the repository's history."""
    import tomllib

    written = tomllib.loads(answers.read_text())
    repeats, apart = claims.load_repeats(), claims.load_apart()
    lines = ["| chapter | the question | the answer | confirmatory verdicts |", "| --- | --- | --- | --- |"]
    for name in chapters():
        path = out_dir / f"{name}.json"
        results = json.loads(path.read_text()) if path.exists() else {}
        counts = confirmatory_counts(name, results, repeats, apart)
        tally = " ".join(f"{counts[v]}{s}" for v, s in SYMBOLS.items() if counts.get(v)) or "none yet"
        entry = written.get(name, {"question": "", "answer": "*not written yet*"})
        lines.append(f"| {name} | {entry['question']} | {entry['answer']} | {tally} |")
    return "\n".join(lines)


def write_readme_table(readme: Path = ROOT / "README.md") -> Path:
    """Replace the table between the README's chapter marks with ``readme_table()``."""
    text = readme.read_text()
    start, end = README_MARKS
    if start not in text or end not in text:
        raise ValueError(f"{readme}: no {start} ... {end} marks to write the chapter table between")
    head, rest = text.split(start, 1)
    readme.write_text(f"{head}{start}\n{readme_table()}\n{end}{rest.split(end, 1)[1]}")
    return readme
