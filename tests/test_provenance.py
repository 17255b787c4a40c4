"""Rerun times, the rerun command and the results page: what a reader sees about reproducing a chapter."""

import json

import pytest

from resid import book
from resid.runtime import provenance


def build(name, seconds, built_now, estimated=False):
    return {"name": name, "seconds": seconds, "built_now": built_now, "estimated": estimated}


def test_cached_time_leaves_out_what_was_built_and_cold_time_adds_what_was_loaded(monkeypatch):
    monkeypatch.setattr(provenance, "BUILDS", [
        build("run a", 300.0, True), build("run a", 300.0, False),  # built, then loaded again: once
        build("run b", 200.0, False, estimated=True), build("model", 20.0, False),
    ])  # fmt: skip
    times = provenance.rerun_times(400.0)
    assert times["cached_seconds"] == pytest.approx(100.0)
    assert times["cold_seconds"] == pytest.approx(100.0 + 300 + 200 + 20)
    assert times["cold_estimated"] and times["artefacts"] == 3


def test_a_run_resumed_now_subtracts_only_the_time_trained_now(monkeypatch):
    """A run interrupted after 250 s and finished in this chapter's 100 s execution (50 s of
    training): cached 50 s, cold 50 + 300."""
    monkeypatch.setattr(provenance, "BUILDS", [])
    provenance.record_build("run", 300.0, built_now=True, seconds_now=50.0)
    times = provenance.rerun_times(100.0)
    assert times["cached_seconds"] == pytest.approx(50.0) and times["cold_seconds"] == pytest.approx(350.0)


def test_cold_time_is_unknown_when_a_loaded_artefact_has_no_recorded_time(monkeypatch):
    monkeypatch.setattr(provenance, "BUILDS", [build("old run", None, False)])
    times = provenance.rerun_times(50.0)
    assert times["cold_seconds"] is None and times["artefacts_without_time"] == 1
    assert provenance.duration(None) == "unknown" and provenance.duration(90) == "90 s"
    assert provenance.duration(1500) == "25 min"


def test_rerun_command_survives_make_splitting_parameters_on_spaces():
    command = book.rerun_command("rmsnorm", {"seeds": (0, 1, 2), "model_name": "smollm2-135m"})
    assert command == 'make chapter CH=rmsnorm P="seeds=(0,1,2) model_name=smollm2-135m"'
    pairs = command.split('P="')[1].rstrip('"').split(" ")
    assert book.parse_parameters(pairs) == {"seeds": (0, 1, 2), "model_name": "smollm2-135m"}
    assert book.rerun_command("outliers", {}) == "make chapter CH=outliers"


def test_results_page_has_a_linked_row_per_claim_and_names_unexecuted_chapters(tmp_path):
    toc = tmp_path / "_toc.yml"
    toc.write_text(
        "format: jb-book\nroot: intro\nparts:\n  - caption: Privileged basis\n    chapters:\n"
        "      - file: chapters/outliers\n      - file: chapters/kurtosis\n"
    )
    claims = [
        {"claim": "kurtosis > 3", "paper": "far above", "ours": "36–219", "criterion": "k > 3",
         "verdict": "reproduced"},
        {"claim": "a | b", "paper": "ours", "ours": "x", "criterion": "y > 0", "verdict": "partly"},
    ]  # fmt: skip
    (tmp_path / "outliers.json").write_text(json.dumps({
        "chapter": "outliers", "quick": False, "claims": claims,
        "rerun": {"command": "make chapter CH=outliers", "cached_seconds": 90.0, "cold_seconds": 110.0,
                  "cold_estimated": False},
        "environment": {"torch": "2.13.0", "inputs": {"corpus pydoc": "71f2ff5d99bdc1f9"}},
    }))  # fmt: skip
    page = book.results_page(tmp_path, toc=toc).read_text()
    # each row shows its criterion and its registration (these rows carry no id: unknown)
    row = (
        "| {ref}`outliers <claims-outliers>`: kurtosis > 3<br><small>paper: far above · ours: 36–219 · "
        'criterion: k > 3</small> | <span class="nowrap">**reproduced**</span> | '
        '<span class="nowrap">unknown</span> |'
    )
    assert row in page
    # three columns a row, the verdict second: it stays inside the text column
    rows = [line for line in page.splitlines() if line.startswith("| {ref}`outliers <claims-outliers>`:")]
    assert len(rows) == 2 and all(r.replace("\\|", "").count("|") == 4 for r in rows), rows
    assert "By registration: **unknown** 2 (1 reproduced, 1 partly)." in page
    assert "a \\| b" in page  # a pipe inside a cell does not split the row
    assert "not executed yet: `make chapter CH=kurtosis`" in page
    assert "Verdicts over all chapters: 1 reproduced, 1 partly." in page and "checks (identities" not in page
    # the summary: each chapter's verdict counts, its confirmatory claims apart (none here) and its checks
    assert "| {ref}`outliers <claims-outliers>` | 2 | 1 | 1 | 0 | 0 | 0 (0) | 0 |" in page
    assert "90 s cached, 110 s cold" in page and "`71f2ff5d99bdc1f9`" in page


def test_the_opening_box_result_gives_the_headline_then_every_verdict_counted():
    rows = [{"verdict": "reproduced"}] * 3 + [{"verdict": "inconclusive"}, {"verdict": "supported"}]
    assert book.verdict_summary(rows, "The basis is privileged. ") == (
        "The basis is privileged. 5 claims judged against their criteria: 3 reproduced, 1 inconclusive, "
        "1 supported."
    )
    assert book.verdict_summary([], "") == ""
    # with each claim's registration, the confirmatory verdicts are said apart; without history, nothing
    ids = [dict(row, id=str(i)) for i, row in enumerate(rows)]
    registered = {
        "0": "confirmatory",
        "1": "exploratory",
        "2": "confirmatory",
        "3": "confirmatory",
        "4": "pending",
    }
    assert book.verdict_summary(ids, "", registered=registered).endswith(
        "Confirmatory (criterion committed before any result): 2 reproduced, 1 inconclusive."
    )
    assert book.verdict_summary(ids, "", registered=dict.fromkeys(registered, "exploratory")).endswith(
        "None of them is confirmatory."
    )
    assert book.verdict_summary(
        ids, "", registered=dict.fromkeys(registered, "unknown")
    ) == book.verdict_summary(ids, "")


def test_a_claim_named_a_repeat_after_its_chapter_ran_leaves_the_opening_box_by_the_next_build(tmp_path):
    import json

    import nbformat

    rows = [{"id": "a", "verdict": "reproduced"}, {"id": "b", "verdict": "reproduced"}]
    glued = "The basis is privileged. " + book.verdict_summary(rows)  # as the chapter glued it
    output = nbformat.v4.new_output("display_data", data={book.RESULT_MIME: glued},
                                    metadata={"scrapbook": {"name": book.RESULT_GLUE}})  # fmt: skip
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("save_results()", outputs=[output])])
    nbformat.write(notebook, tmp_path / "outliers.ipynb")
    (tmp_path / "outliers.json").write_text(json.dumps({"chapter": "outliers", "claims": rows}))

    def result() -> str:
        return (
            nbformat.read(tmp_path / "outliers.ipynb", as_version=4)
            .cells[0]
            .outputs[0]
            .data[book.RESULT_MIME]
        )

    assert not book.refresh_result("outliers", tmp_path, repeats={})  # nothing named since: untouched
    repeats = {"b": {"same_as": "a", "why": "the same number"}}
    assert book.refresh_result("outliers", tmp_path, repeats=repeats)
    assert result() == "The basis is privileged. " + book.verdict_summary(rows, "", repeats)  # headline kept
    # a chapter executed since keeps its headline in its JSON, which then wins over the glued text
    (tmp_path / "outliers.json").write_text(
        json.dumps({"chapter": "outliers", "claims": rows, "headline": ""})
    )
    assert book.refresh_result("outliers", tmp_path, repeats=repeats) and result() == book.verdict_summary(
        rows, "", repeats
    )


def test_the_opening_box_does_not_count_a_claim_that_repeats_another():
    rows = [{"id": "a", "verdict": "reproduced"}, {"id": "b", "verdict": "reproduced"},
            {"id": "c", "verdict": "not reproduced"}]  # fmt: skip
    repeats = {"b": {"same_as": "a", "why": "the same number"}}
    assert book.verdict_summary(rows, "", repeats) == (
        "2 claims judged against their criteria: 1 reproduced, 1 not reproduced. 1 more repeats another "
        "claim's number, not counted."
    )


def test_a_positive_control_and_an_unmeasured_row_are_shown_and_not_counted(tmp_path):
    toc = tmp_path / "_toc.yml"
    toc.write_text("format: jb-book\nroot: intro\nparts:\n  - caption: Attribution\n    chapters:\n"
                   "      - file: chapters/attribution\n")  # fmt: skip
    row = {"claim": "c", "paper": "p", "ours": "0.3 [0.2, 0.4]", "criterion": "> 0", "verdict": "reproduced",
           "estimate": 0.3, "interval": [0.2, 0.4]}  # fmt: skip
    rows = [
        {**row, "id": "task"},
        {**row, "id": "control", "claim": "the control"},
        {**row, "id": "nan", "claim": "never measured", "verdict": "inconclusive", "estimate": float("nan")},
    ]
    (tmp_path / "attribution.json").write_text(json.dumps({"chapter": "attribution", "claims": rows}))
    apart = {"attribution": {"control": {"kind": "positive control", "why": "it shows the metric works"}}}
    page = book.results_page(tmp_path, toc=toc, repeats={}, apart=apart).read_text()
    assert "Verdicts over all chapters: 1 reproduced." in page
    assert "the control<br>" in page and "(positive control: not counted)" in page
    assert "never measured<br>" in page and "(not measured: not counted)" in page
    assert "1 not measured, 1 positive control" in page
    assert book.verdict_summary(rows, "", {}, apart=apart["attribution"]) == (
        "1 claims judged against their criteria: 1 reproduced. 1 more is a positive control, not counted. "
        "1 more could not be measured, not counted."
    )


def test_a_claim_that_repeats_another_measurement_is_shown_and_not_counted(tmp_path):
    toc = tmp_path / "_toc.yml"
    toc.write_text("format: jb-book\nroot: intro\nparts:\n  - caption: Painters\n    chapters:\n"
                   "      - file: chapters/painters\n")  # fmt: skip
    row = {"claim": "c", "paper": "p", "ours": "0.07 [0.06, 0.09]", "criterion": "> 0",
           "verdict": "reproduced", "estimate": 0.07, "interval": [0.06, 0.09]}  # fmt: skip
    rows = [{**row, "id": "worse_than_skip"}, {**row, "id": "worst", "claim": "worst of all"}]
    (tmp_path / "painters.json").write_text(json.dumps({"chapter": "painters", "claims": rows}))
    repeats = {"painters": {"worst": {"same_as": "worse_than_skip", "why": "the runner-up is skip"}}}
    page = book.results_page(tmp_path, toc=toc, repeats=repeats).read_text()
    assert "Verdicts over all chapters: 1 reproduced." in page
    assert "1 more rows repeat another claim's measurement and are not counted" in page
    shown = "worst of all<br><small>paper: p · ours: 0.07 [0.06, 0.09] · criterion: > 0</small> | "
    shown += '<span class="nowrap">'
    assert (
        shown
        + 'reproduced</span> (repeats `worse_than_skip`: not counted) | <span class="nowrap">unknown</span> |'
        in page
    )
    unlisted = book.results_page(tmp_path, toc=toc, repeats={}).read_text()
    assert "Verdicts over all chapters: 2 reproduced." in unlisted


def test_a_chapters_environment_records_the_peak_memory_its_kernel_needed():
    before = provenance.peak_memory_mb()
    ballast = bytearray(200 * 1024 * 1024)  # 200 MB, touched: the peak can only have grown
    ballast[::4096] = b"x" * len(ballast[::4096])
    assert provenance.environment()["peak_memory_mb"] >= max(before, 200)
    del ballast


def test_the_course_page_says_where_each_measured_handout_fits(tmp_path):
    from resid.book import course

    measured = tmp_path / "memory.json"
    run = {"quick": True, "seconds": 77, "error": None, "machine": "a test machine"}
    filed = {"outliers": run | {"peak_memory_mb": 4109.1}, "kurtosis": run | {"peak_memory_mb": 573.0},
             "tda": run | {"peak_memory_mb": None, "error": "KeyError: 'x'"}}  # fmt: skip
    measured.write_text(json.dumps(filed))
    lines = course.memory_table(measured)
    assert "| [outliers](outliers) | 4.0 GB | 77 s | **too big** | fits |" in lines
    assert "| [kurtosis](kurtosis) | 0.6 GB | 77 s | fits | fits |" in lines
    assert any(line.startswith("| tda | failed: KeyError") for line in lines)
    assert "quick runs" in lines[0] and "a test machine" in lines[0]
    assert course.memory_table(tmp_path / "none.json")[0].startswith("No handout has been measured")
