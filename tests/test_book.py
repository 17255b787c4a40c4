"""The chapter pipeline end to end: papermill executes a chapter, Jupyter Book renders it."""

import json
import os
import re
import shutil
import subprocess
import sys
from html import unescape as html_unescape
from pathlib import Path

import nbformat
import pytest
import torch
import yaml

from resid import book
from resid.book import runner  # where main looks its helpers up
from resid.book.sources import QUICK_TAG
from resid.runtime import provenance
from resid.stats import claims

ROOT = Path(__file__).resolve().parents[1]


def words(text) -> str:
    return re.sub(r"\W+", "", str(text))


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    return [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_every_chapter_is_in_the_table_of_contents():
    assert book.chapters()
    generated = ("chapters/course", "chapters/results")
    chapter_files = [f for f in toc_files() if f.startswith("chapters/") and f not in generated]
    assert [f"chapters/{name}" for name in book.chapters()] == chapter_files
    assert toc_files()[-4:] == ["chapters/course", "chapters/results", "running", "bibliography"]


def test_every_chapter_has_exercises_with_checked_solutions():
    """At least three per chapter, each solution a hidden cell whose assertion (an ``assert``,
    or a check that also lists it among the chapter's checks: ``ledger.check``, or the older
    ``claims.check``) the chapter's execution checks (the quick run below, and every build)."""
    for name in book.chapters():
        text = book.source(name).read_text()
        assert len(re.findall(r"^# ### Exercise", text, re.M)) >= 3, name
        solutions = text.split('# %% tags=["hide-cell", "solution"]')[1:]
        assert len(solutions) >= 3, name
        for solution in solutions:
            code = solution.split("\n# %%", 1)[0]
            asserts = re.search(r"^\s*assert ", code, re.M) or re.search(r"\b(ledger|claims)\.check\(", code)
            assert asserts, f"{name}: a solution asserts nothing"
        assert f"(claims-{name})=" in text, f"{name} lacks the label of its claims table"


def test_parameters_parse_to_python_values():
    assert book.parse_parameters(["quick=True", "seed=3", "model_name=gpt2", "lr=1e-3"]) == {
        "quick": True, "seed": 3, "model_name": "gpt2", "lr": 1e-3,
    }  # fmt: skip
    with pytest.raises(book.ChapterError, match="name=value"):
        book.parse_parameters(["quick"])


def test_unknown_chapter_lists_the_valid_ones(capsys):
    assert book.main(["run", "nope"]) == 1
    err = capsys.readouterr().err
    assert "unknown chapter 'nope'" in err and "outliers" in err


def test_every_chapter_declares_the_standard_parameters():
    for name in book.chapters():
        text = book.source(name).read_text()
        cell = text.split('# %% tags=["parameters"]', 1)[1].split("# %%", 1)[0]
        for parameter in ("model_name", "seed", "quick"):
            assert re.search(rf"^{parameter} = ", cell, re.M), f"{name} lacks parameter {parameter}"


def test_a_failing_chapter_names_itself_and_its_notebook_and_overwrites_nothing(tmp_path):
    notebooks, out = tmp_path / "notebooks", tmp_path / "out"
    notebooks.mkdir()
    out.mkdir()
    (out / "broken.ipynb").write_text("the last good execution")
    (notebooks / "01_broken.py").write_text('# %%\nraise RuntimeError("on purpose")\n')
    with pytest.raises(book.ChapterError) as error:
        book.run_chapter("broken", out_dir=out, progress=False, notebooks=notebooks)
    message = str(error.value)
    assert "'broken'" in message and "on purpose" in message and str(out / ".broken.failed.ipynb") in message
    assert (out / "broken.ipynb").read_text() == "the last good execution"


def test_chapters_run_two_at_a_time_each_kernel_with_its_share_of_the_cores(tmp_path, monkeypatch):
    notebooks, out = tmp_path / "notebooks", tmp_path / "chapters"
    notebooks.mkdir()
    for number, name in enumerate(("first", "second"), 1):
        (notebooks / f"0{number}_{name}.py").write_text(
            '# %%\nimport os\n\nprint("threads", os.environ.get("OMP_NUM_THREADS"))\n'
        )
    monkeypatch.setattr(os, "cpu_count", lambda: 4)  # two workers on four cores: two threads each
    seconds = book.run_chapters({"first": {}, "second": {}}, out_dir=out, workers=2, notebooks=notebooks)
    assert set(seconds) == {"first", "second"} and all(s > 0 for s in seconds.values())
    for name in seconds:
        assert "threads 2" in (out / f"{name}.ipynb").read_text()


DEMO_CHAPTER = """# %% [markdown]
# # Demo

# %% tags=["parameters"]
model_name = "smollm2-135m"  # [model]
n_items = 3  # [> 0] items
seeds = (0, 1)  # [non-empty, min 0]
seed = 0  # [min 0]
quick = False  # a small run for CI

# %% tags=["setup"]
import json
import os

# %%
record = json.loads(os.environ["RESID_EXECUTION"])
print(n_items, record["code_sha256"])

# %% tags=["plot"]
print("a figure would be drawn here")

# %%
from resid import progress

for item in progress.track(["first", "second"], "item"):
    pass
"""


def demo_chapter(tmp_path: Path) -> tuple[Path, Path]:
    notebooks, out = tmp_path / "notebooks", tmp_path / "chapters"
    notebooks.mkdir()
    (notebooks / "01_demo.py").write_text(DEMO_CHAPTER)
    return notebooks, out


def test_an_executed_chapter_records_its_fingerprint_and_collapses_its_setup(tmp_path, capfd):
    notebooks, out = demo_chapter(tmp_path)
    path = book.run_chapter("demo", {"n_items": 5}, out_dir=out, progress=True, notebooks=notebooks)
    # what the kernel reports as progress reaches the terminal that runs the chapter
    assert "[resid]   item 2/2: second" in capfd.readouterr().err
    notebook = json.loads(path.read_text())
    record = notebook["metadata"]["resid"]
    assert record["parameters"] == {"n_items": 5}
    assert record["code_sha256"] == book.fingerprint("demo", {}, notebooks)["code_sha256"]
    assert len(record["package_commit"]) == 40 and record["executed"]
    outputs = "".join("".join(o.get("text", "")) for c in notebook["cells"] for o in c.get("outputs", []))
    assert f"5 {record['code_sha256']}" in outputs  # the kernel saw the runner's record
    prompts = {}
    for cell in notebook["cells"]:
        tags = cell["metadata"].get("tags", [])
        if "hide-input" in tags:
            prompts[tags[0]] = cell["metadata"]["mystnb"]["code_prompt_show"]
    assert prompts == {"parameters": "Show the parameters", "setup": "Show the setup code",
                       "injected-parameters": "Show the parameters this execution was given",
                       "plot": "Show the plotting code"}  # fmt: skip
    assert not list(out.glob(".demo-*")), "the scratch directory is left behind"
    # executed with a parameter that is not the default: stale for the book
    status = book.chapter_status("demo", out, notebooks)
    assert status.state == "stale" and "not the defaults" in status.why


def test_a_quick_cell_runs_in_a_quick_run_only_and_never_makes_a_chapter_stale(tmp_path):
    """A cell tagged "quick" (the CI's smaller sizes) is left out of a run at the defaults and of
    its fingerprint, so shrinking the quick run leaves a committed chapter fresh; a quick run
    executes it, and its fingerprint covers it."""
    notebooks, out = demo_chapter(tmp_path)
    source = notebooks / "01_demo.py"
    quick_cell = '# %% tags=["quick"]\nn_items = 1\n\n'
    text = DEMO_CHAPTER.replace("# %%\nrecord = ", quick_cell + "# %%\nrecord = ")
    assert text != DEMO_CHAPTER
    source.write_text(DEMO_CHAPTER)
    before = book.fingerprint("demo", {}, notebooks)
    source.write_text(text)
    assert book.fingerprint("demo", {}, notebooks) == before  # a default run is what it was
    assert "n_items = 1" not in "".join(c.source for c in book.source_notebook("demo", notebooks).cells)
    quick = book.fingerprint("demo", {"quick": True}, notebooks)
    source.write_text(text.replace("n_items = 1", "n_items = 2"))
    assert book.fingerprint("demo", {}, notebooks) == before
    assert book.fingerprint("demo", {"quick": True}, notebooks) != quick  # a quick run's is not
    path = book.run_chapter("demo", {"quick": True}, out_dir=out, progress=False, notebooks=notebooks)
    outputs = "".join("".join(o.get("text", "")) for c in json.loads(path.read_text())["cells"]
                      for o in c.get("outputs", []))  # fmt: skip
    assert outputs.startswith("2 ") or "\n2 " in outputs, outputs


def test_a_chapter_is_stale_when_its_source_changes_or_its_json_disagrees(tmp_path):
    notebooks, out = demo_chapter(tmp_path)
    assert book.chapter_status("demo", out, notebooks).state == "missing"
    path = out / "demo.ipynb"
    out.mkdir()
    record = book.fingerprint("demo", {}, notebooks) | {"package_commit": "unknown", "executed": "now"}
    executed = book.source_notebook("demo", notebooks)
    executed.metadata["resid"] = record
    nbformat.write(executed, path)
    assert "demo.json is missing" in book.chapter_status("demo", out, notebooks).why
    (out / "demo.json").write_text(json.dumps({"execution": record}))
    assert book.chapter_status("demo", out, notebooks).state == "fresh"
    (out / "demo.json").write_text(json.dumps({"execution": record | {"executed": "later"}}))
    assert "different executions" in book.chapter_status("demo", out, notebooks).why
    (out / "demo.json").write_text(json.dumps({"execution": record}))
    tampered = nbformat.read(path, as_version=4)
    tampered.cells[-1].source += "\nprint('not what the source says')"
    nbformat.write(tampered, path)
    assert "executed code cells" in book.chapter_status("demo", out, notebooks).why
    nbformat.write(executed, path)
    source = notebooks / "01_demo.py"
    source.write_text(source.read_text() + "\n# %%\nprint('one more cell')\n")
    status = book.chapter_status("demo", out, notebooks)
    assert status.state == "stale" and "code or criteria changed" in status.why


def test_a_markdown_edit_keeps_a_committed_chapter_fresh_and_a_code_edit_makes_it_stale(tmp_path):
    """On a copy of the repository's notebooks and executed chapters: a changed sentence and a
    new markdown cell leave every fresh chapter fresh (the fingerprint hashes code and criteria,
    as jupyter-cache does) and reach its executed notebook without executing it, outputs
    untouched; one changed line of code, or of its criteria, makes it stale."""
    notebooks, out = tmp_path / "notebooks", tmp_path / "chapters"
    shutil.copytree(ROOT / "notebooks", notebooks)
    shutil.copytree(ROOT / "book" / "chapters", out, ignore=shutil.ignore_patterns(".*"))
    fresh = [n for n in book.chapters(notebooks) if book.chapter_status(n, out, notebooks).state == "fresh"]
    assert fresh, "no committed chapter is fresh"
    for name in fresh:
        book.refresh_narrative(name, out, notebooks)  # a narrative edit of the sources not yet copied in
        source = book.source(name, notebooks)
        text = source.read_text()
        before = json.loads((out / f"{name}.ipynb").read_text())
        edited = text.replace("# %% [markdown]\n# ", "# %% [markdown]\n# An edit. ", 1)
        edited += "\n# %% [markdown]\n# A new closing remark.\n"
        source.write_text(edited)
        status = book.chapter_status(name, out, notebooks)
        assert status.state == "fresh" and "narrative was edited" in status.why, (name, status.why)
        assert book.refresh_narrative(name, out, notebooks)
        after = json.loads((out / f"{name}.ipynb").read_text())
        assert book.chapter_status(name, out, notebooks) == book.ChapterStatus(
            name, "fresh", "", status.record, status.package_changes
        )
        prose = ["".join(c["source"]) for c in after["cells"] if c["cell_type"] == "markdown"]
        assert any(p.startswith("An edit. ") for p in prose) and prose[-1] == "A new closing remark.", name
        code = [c for c in before["cells"] if c["cell_type"] == "code"]
        assert [c for c in after["cells"] if c["cell_type"] == "code"] == code, name  # outputs kept

        source.write_text(edited.replace("\nimport ", "\nimport math  # an edit\nimport ", 1))
        status = book.chapter_status(name, out, notebooks)
        assert status.state == "stale" and "code or criteria changed" in status.why, name
        source.write_text(edited)
        criteria = notebooks / "criteria" / f"{name}.toml"
        criteria.write_text(criteria.read_text() + "\n# an edit\n")
        assert book.chapter_status(name, out, notebooks).state == "stale", name


def test_the_committed_chapters_are_fresh_and_agree_with_their_json():
    """The published book: every executed chapter matches its source at the default parameters
    (its code, criteria and narrative), and every claim in its JSON is shown in its notebook."""
    committed = [n for n in book.chapters() if (book.CHAPTERS_OUT / f"{n}.ipynb").exists()]
    assert committed, "no executed chapter is committed in book/chapters"
    for name in committed:
        status = book.chapter_status(name)
        assert status.state == "fresh", f"{name} is {status.state}: {status.why}; run `make book`"
        assert not status.why, f"{name}: {status.why}"
        results = json.loads((book.CHAPTERS_OUT / f"{name}.json").read_text())
        assert not results.get("quick"), name
        notebook = json.loads((book.CHAPTERS_OUT / f"{name}.ipynb").read_text())
        outputs = [c.get("outputs", []) for c in notebook["cells"]]
        shown = words(html_unescape(json.dumps(outputs, ensure_ascii=False)))
        for row in results["claims"]:
            assert words(row["ours"]) in shown, (name, row["ours"])


def test_bad_parameters_fail_at_once_with_one_line(capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a chapter ran despite a bad parameter")

    monkeypatch.setattr(runner, "run_chapter", never)
    cases = [
        ("outliers", "n_tokens=-5", "n_tokens=-5 is out of range: must be > 0"),
        ("outliers", "bogus=1", "unknown parameter 'bogus'"),
        ("outliers", "model_name=no-such-model", "cannot load model 'no-such-model'"),
        ("kurtosis", "seeds=()", "seeds=() is out of range: must be non-empty"),
        ("kurtosis", "n_sequences=many", "n_sequences='many': must be int"),
        ("painters", "dtype=float8", "must be one of auto|bfloat16|float32|float64"),
    ]
    for chapter, pair, expected in cases:
        assert book.main(["run", chapter, "-p", pair]) == 1
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
        assert "Parameters (default [rule]): model_name=" in err  # it lists the valid ones


def test_a_bfloat16_chapter_on_a_cpu_without_bf16_units_names_the_faster_parameter(capsys, monkeypatch):
    monkeypatch.setattr(provenance, "bf16_units", lambda: False)
    note = book.precision_note("painters", {"dtype": "bfloat16"})
    assert "bfloat16" in note and 'P="dtype=float32"' in note
    assert book.precision_note("painters", {}) is None  # its default, auto, takes float32 here
    assert book.precision_note("painters", {"dtype": "float32"}) is None
    assert book.precision_note("painters", {"dtype": "bfloat16", "device": "cuda"}) is None
    assert book.precision_note("outliers", {}) is None  # no dtype parameter
    monkeypatch.setattr(runner, "run_chapter", lambda name, parameters, **options: Path(f"{name}.ipynb"))
    assert book.main(["run", "painters", "-p", "dtype=bfloat16"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1] == f"[resid] note: {note}", printed  # before the chapter runs
    monkeypatch.setattr(provenance, "bf16_units", lambda: True)
    assert book.precision_note("painters", {"dtype": "bfloat16"}) is None


def test_the_recorded_machine_says_whether_it_has_bf16_units(monkeypatch):
    # a hypervisor shows a CPU as "AMD EPYC" whatever its generation; bf16 timings need more
    for has_units, words in ((False, "no bf16 units"), (True, "bf16 units")):
        monkeypatch.setattr(provenance, "bf16_units", lambda has_units=has_units: has_units)
        machine = provenance.environment()["machine"]
        assert f"{torch.backends.cpu.get_cpu_capability()}, {words})" in machine, machine


def test_every_chapter_declares_its_parameters_with_a_rule():
    for name in book.chapters():
        declared = book.declared_parameters(name)
        for parameter in declared.values():
            assert parameter.rule or isinstance(parameter.default, bool), (name, parameter)
        # the defaults obey the rules, and a run at the defaults has no parameters
        defaults = {k: p.default for k, p in declared.items() if k != "model_name"}
        assert book.validate_parameters(name, defaults) == {}, name
    assert book.validate_parameters("kurtosis", {"seeds": [0, 1]}) == {"seeds": (0, 1)}


def is_exercise(cell_type: str, text: str) -> bool:
    return cell_type == "markdown" and "### Exercise" in text


def test_handouts_keep_every_exercise_with_a_starter_and_drop_every_solution(tmp_path):
    paths = book.write_handouts(tmp_path)
    expected = [f"chapters/{n}.ipynb" for n in book.chapters()]
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == expected
    for name, path in zip(book.chapters(), paths, strict=True):
        cells = json.loads(path.read_text())["cells"]
        source = book.source(name).read_text()
        assert not any("solution" in c["metadata"].get("tags", []) for c in cells), name
        headings = [i for i, c in enumerate(cells) if is_exercise(c["cell_type"], "".join(c["source"]))]
        assert len(headings) == len(re.findall(r"^# ### Exercise", source, re.M)) >= 3, name
        for at, end in zip(headings, [*headings[1:], len(cells)], strict=True):
            tags = [t for c in cells[at:end] for t in c["metadata"].get("tags", [])]
            assert "starter" in tags, f"{name}: an exercise without a starter cell"
        first_code = next(c for c in cells if c["cell_type"] == "code")
        assert first_code["metadata"]["tags"] == ["handout-setup"], name


def test_the_committed_handouts_are_the_chapters_handouts():
    """book/handouts (what the launch buttons open) is what `make handouts` writes now."""
    package = book.handout_package()
    for name in book.chapters():
        committed = json.loads((book.HANDOUTS_OUT / "chapters" / f"{name}.ipynb").read_text())["cells"]
        current = book.handout(name, package=package).cells
        assert [("".join(c["source"]), c["metadata"].get("tags", [])) for c in committed] == [
            (c.source, c.metadata.get("tags", [])) for c in current
        ], f"{name}: the committed handout is stale; run `make handouts`"


MYST = re.compile(r"\{[a-z]+(:[a-z]+)?\}`|^:::|^```\{|^\([\w-]+\)=\s*$", re.M)  # a role, a fence, a target


def test_a_tables_long_identifiers_may_break_after_underscores_and_nothing_else_changes(tmp_path):
    from resid.book import pages

    page = tmp_path / "page.html"
    html = ('<p class="a_b">keep_this</p><table class="x_y"><tr><td title="t_u">as gradients_disagree_with'
            "</td><td>0.125</td></tr></table>")  # fmt: skip
    page.write_text(html)
    pages.soft_breaks(page)
    assert page.read_text() == html.replace("gradients_disagree_with", "gradients_<wbr>disagree_<wbr>with")


def test_every_chapter_source_opens_with_a_box_whose_first_line_is_its_result():
    for name in book.chapters():
        lines = book.source(name).read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("# :::{admonition}"))
        body = [line for line in lines[at + 1 :] if not line.startswith("# :class:")]
        assert body[0] == "# **Result:** {glue:md}`chapter_result`", f"{name}: its box opens {body[0]!r}"
        assert "rerun" in lines[at], name


def test_no_handout_shows_myst_markup():
    """JupyterLab and Colab render a handout's Markdown as plain Markdown: every role and fence
    of the chapter's MyST is resolved when the handout is written."""
    for name in book.chapters():
        cells = json.loads((book.HANDOUTS_OUT / "chapters" / f"{name}.ipynb").read_text())["cells"]
        for cell in cells:
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                assert not MYST.search(text), f"{name}: {MYST.search(text)[0]!r} in {text[:200]!r}"
        opening = next(c for c in cells if c["cell_type"] == "markdown")
        assert "\n> **" in "".join(opening["source"]), f"{name}: its opening box is not a blockquote"
        assert "computed when the chapter runs" not in "".join(opening["source"]), name


def test_myst_becomes_plain_markdown_and_an_unknown_role_fails():
    from resid.book import handouts

    references = {"a2020x": ("Ann et al.", "2020"), "b2021y": ("Bo and Cy", "2021")}
    text = "\n".join([
        "(claims-x)=",
        ":::{admonition} What it found",
        ":class: tip",
        "**Result:** {glue:md}`result`, in {glue:text}`time` ({cite:p}`a2020x,b2021y`).",
        "",
        "As {cite:t}`a2020x` say; see {ref}`claims-x` and {ref}`the table <claims-x>`; {glue:text}`later`.",
        ":::",
    ])  # fmt: skip
    plain = handouts.plain_markdown(text, {"result": "**3 reproduced**", "time": "4 min"}, references,
                                    {"claims-x": "Claims, in “X”"})  # fmt: skip
    assert plain.splitlines() == [
        "> **What it found**",
        ">",
        "> **Result:** **3 reproduced**, in 4 min ((Ann et al., 2020; Bo and Cy, 2021)).",
        ">",
        "> As Ann et al. (2020) say; see Claims, in “X” and the table; (computed when the chapter runs).",
    ]
    with pytest.raises(ValueError, match="numref"):
        handouts.plain_markdown("{numref}`fig-1`", {}, references, {})


def test_make_lab_keeps_a_students_work_and_force_keeps_what_it_replaces(tmp_path, capsys):
    from resid.book import handouts

    work = tmp_path / "lab"
    first = handouts.lab_copies(work)
    assert len(first["written"]) == len(book.chapters()) and not first["kept"]
    mine = work / "outliers.ipynb"
    edited = mine.read_text().replace("raise NotImplementedError  # your code here", "return 3.0  # mine", 1)
    assert edited != mine.read_text()
    mine.write_text(edited)
    again = handouts.lab_copies(work)
    assert not again["written"] and mine.read_text() == edited  # a second `make lab` keeps it
    (work / "tda.ipynb").unlink()
    assert handouts.lab_copies(work)["written"] == [work / "tda.ipynb"]  # only what is missing
    forced = handouts.lab_copies(work, force=True)
    kept = dict(forced["replaced"])[mine]
    assert kept.read_text() == edited and "return 3.0  # mine" not in mine.read_text()
    ignored = subprocess.run(["git", "check-ignore", "-q", "lab/outliers.ipynb"], cwd=ROOT)
    assert ignored.returncode == 0, "lab/ must be git-ignored: a student's work is not the book's"


def test_the_install_cell_names_the_published_wheel_and_refuses_a_bare_name(tmp_path):
    from resid.book import handouts

    config = tmp_path / "_config.yml"
    config.write_text('repository:\n  url: "https://github.com/Some-One/resid-book"\n')
    wheel = handouts.wheel_name()
    assert handouts.handout_package(config) == f"https://some-one.github.io/resid-book/wheel/{wheel}"
    config.write_text('html:\n  baseurl: "https://example.org/book"\nrepository:\n  url: ""\n')
    assert handouts.handout_package(config) == f"https://example.org/book/wheel/{wheel}"
    config.write_text('repository:\n  url: ""\n')
    assert handouts.handout_package(config) is None
    setup = handouts.HANDOUT_SETUP.format(package=None)
    # run outside any resid (find_spec answers None), without pip: each refusal is one line
    prelude = "import importlib.util\nimportlib.util.find_spec = lambda name: None\n"
    for environ, message in (
        ({}, "set RESID_PACKAGE"),
        ({"RESID_PACKAGE": "resid"}, "neither a path nor a URL"),
    ):
        env = {k: v for k, v in os.environ.items() if k != "RESID_PACKAGE"} | environ
        run = subprocess.run([sys.executable, "-c", prelude + setup], env=env, capture_output=True, text=True)
        last = run.stderr.splitlines()[-1]
        assert run.returncode != 0 and last.startswith("RuntimeError") and message in last, run.stderr


def test_starter_cells_and_presentation_tags_keep_a_chapter_fresh_and_reach_its_pages(tmp_path):
    """A new exercise starter (never executed in the chapter) and a folded check table change
    how the chapter reads, not what it computes: it stays fresh, and refreshing its narrative
    folds the table's output without executing anything."""
    notebooks, out = tmp_path / "notebooks", tmp_path / "chapters"
    shutil.copytree(ROOT / "notebooks", notebooks)
    shutil.copytree(ROOT / "book" / "chapters", out, ignore=shutil.ignore_patterns(".*"))
    fresh = [n for n in book.chapters(notebooks) if book.chapter_status(n, out, notebooks).state == "fresh"]
    assert fresh, "no committed chapter is fresh"
    name = fresh[0]
    book.refresh_narrative(name, out, notebooks)
    source = book.source(name, notebooks)
    text = source.read_text()
    edited = text.replace('# %% tags=["checks"]', "# %%", 1)
    starter = '# %% tags=["starter"]\n'
    edited = edited.replace(starter, starter + 'print("a new starter line")\n', 1)
    source.write_text(edited)
    status = book.chapter_status(name, out, notebooks)
    assert status.state == "fresh" and "narrative was edited" in status.why, status.why
    assert book.refresh_narrative(name, out, notebooks)
    unfolded = [c for c in json.loads((out / f"{name}.ipynb").read_text())["cells"] if is_checks(c)]
    assert unfolded and "hide-output" not in unfolded[0]["metadata"].get("tags", [])
    source.write_text(text)
    assert book.refresh_narrative(name, out, notebooks)
    folded = [c for c in json.loads((out / f"{name}.ipynb").read_text())["cells"] if is_checks(c)]
    assert "hide-output" in folded[0]["metadata"]["tags"]
    assert folded[0]["metadata"]["mystnb"]["code_prompt_show"].startswith("Show the checks")
    assert folded[0]["outputs"] == unfolded[0]["outputs"]
    source.write_text(text.replace('# %% tags=["starter"]', '# %% tags=["startr"]', 1))
    assert book.chapter_status(name, out, notebooks).state == "stale"  # a cell that now executes


def is_checks(cell) -> bool:
    return any(table in "".join(cell["source"]) for table in ("check_rows).style", "checks_table()"))


def test_a_figures_alt_text_is_narrative_reaching_its_page_without_execution(tmp_path):
    """The alt text of a plot cell (``# %% tags=["plot"] alt="..."``) is how the chapter reads:
    changing it keeps the chapter fresh, and refreshing puts it on the figure (myst-nb's image
    option) next to the collapsed code's toggle."""
    notebooks, out = tmp_path / "notebooks", tmp_path / "chapters"
    shutil.copytree(ROOT / "notebooks", notebooks)
    shutil.copytree(ROOT / "book" / "chapters", out, ignore=shutil.ignore_patterns(".*"))
    fresh = [n for n in book.chapters(notebooks) if book.chapter_status(n, out, notebooks).state == "fresh"]
    name = fresh[0]
    source = book.source(name, notebooks)
    text = source.read_text()
    header = next(line for line in text.splitlines() if line.startswith('# %% tags=["plot"] alt="'))
    source.write_text(text.replace(header, '# %% tags=["plot"] alt="A new description of this figure."', 1))
    assert book.chapter_status(name, out, notebooks).state == "fresh"
    book.refresh_narrative(name, out, notebooks)
    cells = json.loads((out / f"{name}.ipynb").read_text())["cells"]
    described = [c for c in cells if c["metadata"].get("alt") == "A new description of this figure."]
    assert len(described) == 1 and any(o.get("data", {}).get("image/png") for o in described[0]["outputs"])
    mystnb = described[0]["metadata"]["mystnb"]
    assert mystnb["image"] == {"alt": "A new description of this figure."}
    assert mystnb["code_prompt_show"] == "Show the plotting code"


def test_every_figure_a_chapter_draws_has_alt_text():
    """A reader who cannot see a figure is told what it shows: every cell of a chapter source that
    draws one is a plot cell with alt text of a sentence or more."""
    import jupytext

    draws = re.compile(r"plt\.(subplots|figure)\(|sns\.relplot\(")
    for name in book.chapters():
        for cell in jupytext.read(book.source(name)).cells:
            if cell.cell_type == "code" and draws.search(cell.source):
                assert "plot" in cell.metadata.get("tags", []), (name, cell.source[:80])
                assert len(cell.metadata.get("alt", "").split()) >= 6, (name, cell.source[:80])


def first_exercise(cells) -> int:
    return next(i for i, c in enumerate(cells) if is_exercise(c.cell_type, c.source))


@pytest.mark.parametrize("name", book.chapters())
def test_a_handout_is_its_chapter_cell_for_cell_up_to_its_first_exercise(name):
    # So the quick book, which executes every chapter, runs what a student runs before the first
    # exercise; executing each handout again would repeat about ten minutes of the suite.
    import jupytext

    chapter, notebook = jupytext.read(book.source(name)), book.handout(name)
    notebook.cells = [c for c in notebook.cells if "handout-setup" not in c.metadata.get("tags", [])]
    # a quick cell only shrinks the quick book's sizes: the same code runs, and no handout has one
    chapter.cells = [c for c in chapter.cells if QUICK_TAG not in c.metadata.get("tags", [])]
    first = first_exercise(notebook.cells)
    assert first == first_exercise(chapter.cells), "a solution comes before the first exercise"
    pairs = list(zip(chapter.cells[:first], notebook.cells[:first], strict=True))
    assert all(a.cell_type == b.cell_type for a, b in pairs)
    # the same code; the handout's Markdown is the chapter's made plain (test_no_handout_shows_myst_markup)
    assert all(a.source == b.source for a, b in pairs if a.cell_type == "code")


def test_the_pages_workflow_builds_the_committed_chapters_with_make_book():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "book.yml").read_text())
    steps = workflow["jobs"]["build"]["steps"]
    assert any(step.get("run") == "make book CHECK=1" for step in steps)
    assert any(step.get("with", {}).get("path") == "book/_build/html" for step in steps)
    named = [
        step["run"]
        for step in steps
        if "repository.url" in step.get("name", "") or "url:" in step.get("run", "")
    ]
    assert named and "github.repository" in named[0]  # the launch buttons' repository
    # registration is read from the history: a shallow checkout would call every claim exploratory
    checkout = next(step for step in steps if step.get("uses", "").startswith("actions/checkout"))
    assert checkout.get("with", {}).get("fetch-depth") == 0
    # the handouts the site offers name the wheel published beside it, and the wheel is there
    runs = [step.get("run", "") for step in steps]
    assert runs.index("make handouts") > runs.index(named[0]) and "make book CHECK=1" in runs
    assert any("resid.book wheel --site book/_build/html" in run for run in runs)
    dry = subprocess.run(["make", "-n", "book", "CHECK=1"], cwd=ROOT, capture_output=True, text=True)
    assert "resid.book update --no-execute" in dry.stdout and "resid.book html" in dry.stdout
    full = subprocess.run(["make", "-n", "book", "ALL=1"], cwd=ROOT, capture_output=True, text=True)
    assert "resid.book all" in full.stdout


@pytest.mark.slow
def test_the_published_pages_launch_each_chapters_handout_in_binder_and_colab(committed_book):
    """Built as the Pages workflow builds it (the repository named), each committed chapter's page
    has a Binder and a Colab button, and both open that chapter's committed handout."""
    from conftest import PUBLISHED_FROM

    repo = PUBLISHED_FROM.removeprefix("https://github.com/")
    names = [n for n in book.chapters() if (book.CHAPTERS_OUT / f"{n}.ipynb").exists()]
    assert names
    for name in names:
        page = html_unescape((committed_book / "_build" / "html" / "chapters" / f"{name}.html").read_text())
        handout = f"book/handouts/chapters/{name}.ipynb"
        assert f"https://mybinder.org/v2/gh/{repo}/main?urlpath=lab/tree/{handout}" in page, name
        assert f"https://colab.research.google.com/github/{repo}/blob/main/{handout}" in page, name
        student = nbformat.read(book.ROOT / handout, as_version=4)
        assert not any("solution" in c.metadata.get("tags", []) for c in student.cells), name


def test_quick_chapters_execute_and_the_book_builds_offline(quick_book):
    html = quick_book / "_build" / "html"
    for name in book.chapters():
        assert (quick_book / "chapters" / f"{name}.json").exists()
    page = (html / "chapters" / "outliers.html").read_text()
    images = re.findall(r'<img[^>]+src="([^"]+)"', page)
    assert len(images) >= 4 and all((html / "chapters" / src).resolve().exists() for src in images)
    assert "paper" in page and "verdict" in page
    for path in html.rglob("*.html"):
        text = path.read_text()
        external = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', text)
        assert not external, f"{path.name} loads {external}"
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()


@pytest.mark.slow
def test_every_chapter_opens_with_how_to_rerun_it_and_ends_with_its_claims(quick_book):
    html = quick_book / "_build" / "html" / "chapters"
    for name in book.chapters():
        results = json.loads((quick_book / "chapters" / f"{name}.json").read_text())
        page = (html / f"{name}.html").read_text()
        box = page[: page.index('id="claims-' + name)]
        # the opening box holds the exact command and the measured times, glued from this run
        assert f"CH={name}" in re.sub(r"<[^>]+>", "", box.replace('<span class="pre">', "")), name
        assert results["rerun"]["command"].startswith(f"make chapter CH={name}")
        assert results["rerun"]["cached_seconds"] > 0 and "environment" in results
        # the claims table is the chapter's last section
        article = page[page.index("<article") : page.index("</article>")]
        last_section = article.rsplit("<section", 1)[1]
        assert "verdict" in last_section and "Exercise" not in last_section, name


@pytest.mark.slow
def test_solutions_are_hidden_behind_a_toggle(quick_book):
    for name in book.chapters():
        page = (quick_book / "_build" / "html" / "chapters" / f"{name}.html").read_text()
        hidden = page.count('class="cell tag_hide-cell tag_solution')
        assert hidden >= 3, f"{name}: {hidden} hidden solutions"
        assert page.count("<details") >= hidden


@pytest.mark.slow
def test_a_chapters_download_is_its_handout_and_the_course_page_lists_every_chapter(quick_book):
    html = quick_book / "_build" / "html"
    for name in book.chapters():
        download = json.loads((html / "_sources" / "chapters" / f"{name}.ipynb").read_text())["cells"]
        tags = [t for c in download for t in c["metadata"].get("tags", [])]
        assert "solution" not in tags and "starter" in tags and "handout-setup" in tags, name
        teachers = json.loads((html / "solutions" / f"{name}.ipynb").read_text())["cells"]
        assert any("solution" in c["metadata"].get("tags", []) for c in teachers), name
    course = (html / "chapters" / "course.html").read_text()
    for name in book.chapters():
        assert f'href="{name}.html"' in course, name
    assert "JupyterLab" in course  # how a student opens a handout


@pytest.mark.slow
def test_results_page_has_every_claim_and_links_to_its_chapter(quick_book):
    page = (quick_book / "_build" / "html" / "chapters" / "results.html").read_text()
    n_claims, text = 0, words(html_unescape(re.sub(r"<[^>]+>", "", page)))
    for name in book.chapters():
        claims = json.loads((quick_book / "chapters" / f"{name}.json").read_text())["claims"]
        n_claims += len(claims)
        assert f'href="{name}.html#claims-{name}"' in page, name
        for row in claims:  # compared without markup and punctuation, which Sphinx typesets
            assert words(row["ours"]) in text, (name, row["ours"])
    assert page.count("<tr") - page.count("<thead") >= n_claims
    assert "torch" in page and "sha256" in page


@pytest.mark.slow
def test_bibliography_lists_the_three_papers(quick_book):
    page = (quick_book / "_build" / "html" / "bibliography.html").read_text()
    for title in ("Privileged bases", "A primer on the inner workings", "Transformer layers as painters"):
        assert title.lower() in page.lower(), title


@pytest.mark.slow
@pytest.mark.parametrize(
    "path", sorted((ROOT / "notebooks" / "drafts").glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem
)
def test_draft_chapters_run_in_quick_mode(tmp_path, path):
    name = path.stem.split("_", 1)[1]
    out = book.run_chapter(name, {"quick": True}, out_dir=tmp_path, progress=False, notebooks=path.parent)
    assert (tmp_path / f"{name}.json").exists() and out.exists()


def test_make_clean_removes_only_what_a_build_rebuilds():
    """``make clean`` never deletes a committed file: every path it removes is untracked."""
    dry_run = subprocess.run(["make", "-n", "clean"], cwd=ROOT, capture_output=True, text=True, check=True)
    recipe = dry_run.stdout
    removed = [word for line in recipe.splitlines() if line.startswith("rm ") for word in line.split()[1:]
               if not word.startswith("-")]  # fmt: skip
    assert "book/_build" in removed
    tracked = subprocess.run(["git", "ls-files", "--", *removed], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    assert not tracked, f"make clean would delete committed files: {tracked[:5]}"


def test_status_says_whether_re_executing_reads_records_or_which_runs_it_trains(monkeypatch, tmp_path):
    from resid.train import records

    monkeypatch.setenv(records.ENV, str(tmp_path / "runs"))
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache"))
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "aaaa000011112222.json").write_text("{}")
    (tmp_path / "cache" / "runs").mkdir(parents=True)
    (tmp_path / "cache" / "runs" / "bbbb000011112222.pt").write_text("")
    kept = {"aaaa000011112222": 600.0, "bbbb000011112222": 700.0}
    assert "reads its 2 training runs from their records" in book.training_needed({"training_runs": kept})
    needed = book.training_needed({"training_runs": kept | {"cccc000011112222": 1800.0}})
    assert needed.startswith("re-executing trains 1 of its 3 runs (≈ 30 min") and "cccc000011112222" in needed
    assert "recorded from its next execution" in book.training_needed({})
    assert book.training_needed({"training_runs": {}}) == "it trains nothing"
    # a tuned lens's record keeps no weights: it counts as kept only where the cache has them
    (tmp_path / "runs" / "lens-dddd000011112222.json").write_text("{}")
    lens = {"lens-dddd000011112222": 330.0}
    assert book.training_needed({"training_runs": lens}).startswith("re-executing trains 1 of its 1 runs")
    (tmp_path / "cache" / "lenses").mkdir()
    (tmp_path / "cache" / "lenses" / "lens-dddd000011112222.pt").write_text("")
    assert "training nothing" in book.training_needed({"training_runs": lens})
    # a record that another chapter's retraining rewrote without the measurement this one read
    (tmp_path / "runs" / "aaaa000011112222.json").write_text('{"measurements": {"m@1:2": 0.5}}')
    read = {"aaaa000011112222": ["m@1:2"]}
    assert "training nothing" in book.training_needed({"training_runs": kept, "measurements_read": read})
    lost = {"aaaa000011112222": ["m@1:2", "direct_path@3:4"]}
    needed = book.training_needed({"training_runs": kept, "measurements_read": lost})
    assert needed.startswith("re-executing trains 1 of its 2 runs") and "aaaa000011112222" in needed
    # with the weights in this machine's cache the measurement is computed, nothing trained
    assert "training nothing" in book.training_needed(
        {"training_runs": kept, "measurements_read": {"bbbb000011112222": ["x@1:2"]}})  # fmt: skip


def test_a_chapter_records_which_measurements_of_a_run_it_read(monkeypatch, tmp_path):
    from dataclasses import replace

    from resid import train
    from resid.runtime import provenance
    from resid.train import records

    monkeypatch.setenv(records.ENV, str(tmp_path / "runs"))
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(provenance, "BUILDS", [])
    monkeypatch.setattr(provenance, "MEASUREMENTS", {})
    cfg = replace(train.PRESETS["tiny-layernorm"], steps=2, eval_every=2, batch_size=2, seed=3)

    def n_layers(model) -> int:
        return model.cfg.n_layers

    assert train.measure(cfg, n_layers) == cfg.model.n_layers
    read = provenance.rerun_times(1.0)["measurements_read"]
    assert read == {cfg.key(): [records.measurement_id(n_layers, {})]}


def test_registration_is_read_from_the_history():
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], capture_output=True, text=True)
    if shallow.returncode or shallow.stdout.strip() == "true":
        pytest.skip("needs the repository's full history")
    # the IOI chapter's criteria were committed before its first execution
    assert book.registration("ioi", "task")["registration"] == "confirmatory"
    # the outliers chapter had executed before its criteria file existed
    assert book.registration("outliers", "outliers_few")["registration"] == "exploratory"
    # a claim added later to an executed chapter is confirmatory only where registration.toml lists it
    listed = book.registration("attribution", "lrp_more_faithful")
    assert listed["registration"] in ("pending", "confirmatory") and listed["criterion"]
    assert book.registration("ioi", "no_such_claim")["registration"] == "unknown"
    # criteria committed beside a draft before its runs, and moved with it when it was promoted
    draft = book.registration("adam", "adam_makes_heavy_directions_1e2")
    assert draft["registration"] in ("pending", "confirmatory") and draft["criterion"]


def test_the_adam_chapters_defaults_are_the_design_committed_with_its_criteria():
    from resid.train import experiments

    declared = book.declared_parameters("adam")
    design = experiments.ADAM_DESIGN
    for name in ("seeds", "learning_rates", "sgd_lr", "sgd_steps_factor", "widths", "width_seeds",
                 "width_reference_lr"):  # fmt: skip
        assert declared[name].default == design[name], name
    jobs = experiments.adam_design()
    assert len({cfg.key() for *_, cfg in jobs}) == 77  # 60 on the grid, 5 SGD, 12 widths (d 256 shared)
    criteria = claims.load_criteria("adam")
    assert {f"adamw_privileged_{r}" for r in ("5e3", "1e2", "2e2")} <= set(criteria)


def test_the_replication_queue_trains_the_three_norms_on_seeds_no_chapter_used(capsys, tmp_path, monkeypatch):
    from resid.train import experiments, records

    jobs = experiments.replication_design()
    assert {(name, seed) for _, name, _, seed, _ in jobs} == {
        (name, seed) for name in ("layernorm", "basisfree", "rmsnorm") for seed in range(201, 206)
    }
    used = {cfg.key() for *_, cfg in experiments.adam_design()} | {
        experiments.variant(name, seed).key()
        for name in ("layernorm", "basisfree", "rmsnorm")
        for seed in range(6)
    }
    assert not used & {cfg.key() for *_, cfg in jobs}
    monkeypatch.setenv(records.ENV, str(tmp_path))  # an empty records folder: every run is missing
    monkeypatch.setattr("resid.train.training.estimated_seconds", lambda cfg: 600.0)
    experiments.main(["queue", "replication", "--estimate"])
    out = capsys.readouterr().out
    assert "replication: 15 runs, 15 without a record" in out and "2.5 h" in out


def test_the_rotations_confirmatory_queue_trains_every_variant_on_seeds_no_chapter_used(
    capsys, tmp_path, monkeypatch
):
    from resid.train import experiments, records

    jobs = experiments.rotations_fresh_design()
    names = ("basisfree", "shared rotation", "independent rotations")
    order = (("float32", names[:2]), ("float32", names[2:]), ("bfloat16", names[:2]))
    assert [(part, name, seed) for part, name, _, seed, _ in jobs] == [
        (part, name, seed) for part, group in order for name in group for seed in range(501, 506)
    ]
    used = {cfg.key() for design in (experiments.adam_design, experiments.replication_design,
                                     experiments.rotations_design) for *_, cfg in design()}  # fmt: skip
    assert not used & {cfg.key() for *_, cfg in jobs} and len({cfg.key() for *_, cfg in jobs}) == 25
    assert experiments.MEASUREMENTS["rotations-fresh"] is experiments.rotations_measurements
    monkeypatch.setenv(records.ENV, str(tmp_path))  # an empty records folder: every run is missing
    monkeypatch.setattr("resid.train.training.estimated_seconds", lambda cfg: 360.0)
    experiments.main(["queue", "rotations-fresh", "--estimate"])
    assert "rotations-fresh: 25 runs, 25 without a record" in capsys.readouterr().out


def test_the_rotations_queue_trains_new_runs_first_and_retrains_those_whose_weights_it_needs(
    capsys, tmp_path, monkeypatch
):
    import shutil

    from resid.train import experiments, records

    jobs = experiments.rotations_design()
    assert len({cfg.key() for *_, cfg in jobs}) == 30
    parts = [part for part, *_ in jobs]
    assert not any("weights" in part for part in parts[:20]) and all("weights" in part for part in parts[20:])
    # the runs whose weights the chapter rotates are the Kurtosis chapter's regime runs
    assert {cfg.key() for part, *_, cfg in jobs if "weights" in part} == {
        experiments.variant(name, seed).key() for name in ("basisfree", "layernorm") for seed in range(1, 6)
    }
    monkeypatch.setenv(records.ENV, str(tmp_path / "runs"))
    monkeypatch.setenv("RESID_CACHE", str(tmp_path / "cache"))  # nothing cached here
    (tmp_path / "runs").mkdir()
    recorded = experiments.variant("basisfree", 1).key()
    shutil.copy(ROOT / "book" / "runs" / f"{recorded}.json", tmp_path / "runs")
    monkeypatch.setattr("resid.train.training.estimated_seconds", lambda cfg: 600.0)
    experiments.main(["queue", "rotations", "--estimate"])
    out = capsys.readouterr().out
    assert "rotations: 30 runs, 29 without a record" in out
    assert "1 recorded whose weights the chapter needs and this machine lacks" in out and "5.0 h" in out


def test_no_executed_chapter_shows_a_cell_that_only_writes_its_prose():
    """A code cell whose whole output is Markdown (a paragraph written from computed numbers) is
    narrative: its code is collapsed (tag ``prose``), so the page reads as text."""
    import nbformat

    hidden = {"hide-input", "remove-input", "remove-cell", "hide-cell"}
    shown = []
    for name in book.chapters():
        notebook = nbformat.read(book.CHAPTERS_OUT / f"{name}.ipynb", as_version=4)
        for index, cell in enumerate(notebook.cells):
            outputs = cell.get("outputs", [])
            prose_only = outputs and all("text/markdown" in o.get("data", {}) for o in outputs)
            if cell.cell_type == "code" and prose_only and not hidden & set(cell.metadata.get("tags", [])):
                shown.append(f"{name} cell {index}: {cell.source.splitlines()[0][:60]}")
    assert not shown, shown
