import json
import math

import pytest

from resid import stats
from resid.runtime.paths import ROOT
from resid.stats import claims

ABOVE = claims.Criterion("x", "c", "s", "m", "above", threshold=0.6, partly=0.3)


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [(0.7, 0.9, "reproduced"), (0.5, 0.9, "inconclusive"), (0.35, 0.55, "partly"),
     (0.1, 0.2, "not reproduced"), (0.2, 0.4, "inconclusive")],
)  # fmt: skip
def test_a_verdict_needs_the_whole_interval_on_one_side(low, high, verdict):
    assert claims.judge(ABOVE, (low + high) / 2, low, high)["verdict"] == verdict


def test_below_within_and_predictions():
    below = claims.Criterion("y", "c", "s", "m", "below", threshold=0.1)
    assert claims.judge(below, 0.05, 0.01, 0.08)["verdict"] == "reproduced"
    assert claims.judge(below, 0.2, 0.15, 0.3)["verdict"] == "not reproduced"
    within = claims.Criterion("z", "c", "s", "m", "within", threshold=0.25)
    assert claims.judge(within, 0.0, -0.1, 0.2)["verdict"] == "reproduced"
    assert claims.judge(within, 0.4, 0.3, 0.5)["verdict"] == "not reproduced"
    assert claims.judge(within, 0.2, 0.1, 0.3)["verdict"] == "inconclusive"
    predicted = claims.Criterion("p", "c", "s", "m", "above", threshold=0.0, prediction=True)
    assert claims.judge(predicted, 1.0, 0.5, 1.5)["verdict"] == "supported"
    row = claims.judge(predicted, -1.0, -1.5, -0.5)
    assert (
        row["verdict"] == "not supported" and row["interval"] == [-1.5, -0.5] and "m > 0" in row["criterion"]
    )
    assert row["id"] == "p"
    assert list(claims.table([row]).columns) == ["claim", "paper", "ours", "criterion", "verdict"]


def test_inconsistent_criteria_are_refused(tmp_path):
    with pytest.raises(ValueError, match="weaker"):
        claims.Criterion("x", "c", "s", "m", "above", threshold=0.3, partly=0.6)
    (tmp_path / "ch.toml").write_text(
        '[a]\nclaim="c"\nsource="s"\nmetric="m"\ndirection="sideways"\nthreshold=1\n'
    )
    with pytest.raises(ValueError, match="direction"):
        claims.load_criteria("ch", tmp_path)
    with pytest.raises(FileNotFoundError):
        claims.load_criteria("nothing", tmp_path)


def test_a_failing_check_stops_the_chapter():
    assert claims.check("sum rule", True, "1.0 = 1.0")["passed"]
    with pytest.raises(claims.CheckFailed, match="sum rule"):
        claims.check("sum rule", False, "1.0 != 2.0")


def test_every_committed_criteria_file_parses():
    files = sorted(claims.CRITERIA.glob("*.toml"))
    assert files, "no criteria files found"
    for path in files:
        criteria = claims.load_criteria(path.stem)
        assert criteria and all(c.metric and c.source for c in criteria.values())


def test_drafts_criteria_parse_and_every_claim_listed_as_new_has_a_criterion():
    import tomllib

    drafts = claims.CRITERIA.parent / "drafts" / "criteria"
    for path in sorted(drafts.glob("*.toml")):
        criteria = claims.load_criteria(path.stem, drafts)
        assert criteria and all(c.metric and c.source for c in criteria.values()), path
    listed = tomllib.loads((claims.CRITERIA.parent / "registration.toml").read_text())["new"]
    for chapter, ids in listed.items():
        known = set()
        for folder in (claims.CRITERIA, drafts):
            if (folder / f"{chapter}.toml").exists():
                known |= set(claims.load_criteria(chapter, folder))
        assert set(ids) <= known, f"{chapter}: {sorted(set(ids) - known)} have no criterion"


def test_an_unmeasured_interval_is_inconclusive_and_a_reversed_one_an_error():
    assert claims.judge(ABOVE, float("nan"), float("nan"), float("nan"))["verdict"] == "inconclusive"
    with pytest.raises(ValueError, match="reversed"):
        claims.judge(ABOVE, 0.5, 0.9, 0.1)


def test_a_chapter_with_criteria_reports_every_claim_against_them_with_an_interval():
    """Every pre-registered claim appears in the chapter's committed results, judged by its own
    criterion, with an interval; no claim is added without one; checks are listed apart."""
    import json

    from resid import book

    executed = sorted(book.CHAPTERS_OUT.glob("*.json"))
    assert executed, "no executed chapter found"
    for results in executed:
        rows = json.loads(results.read_text())["claims"]
        expected = [c.describe() for c in claims.load_criteria(results.stem).values()]  # a file must exist
        assert sorted(row["criterion"] for row in rows) == sorted(expected), results.stem
        verdicts = claims.VERDICTS + claims.PREDICTION_VERDICTS
        assert all(len(row["interval"]) == 2 and row["verdict"] in verdicts for row in rows), results.stem
        assert all(check["passed"] for check in json.loads(results.read_text()).get("checks", []))


def test_interval_text_is_the_estimate_and_its_interval_and_over_seeds_a_t_interval():
    assert claims.interval_text(1.234, 0.5, 2.0, "excess") == "excess 1.23 [0.5, 2]"
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    mean, low, high = stats.t_interval(values)
    assert claims.t_interval_text(values) == claims.interval_text(mean, low, high)
    assert claims.t_interval_text(values).startswith("3 [") and low < 3 < high


def test_every_claim_can_fail_and_can_hold_somewhere_in_its_metrics_range():
    """Each criterion, read against the range its metric can take (notebooks/ranges.toml), gives
    "not reproduced" to some value and "reproduced" to another: no claim is decided before it is
    measured. Every criterion needs a declared range."""
    import math
    import tomllib

    ranges = tomllib.loads((claims.CRITERIA.parent / "ranges.toml").read_text())
    folders = (claims.CRITERIA, claims.CRITERIA.parent / "drafts" / "criteria")
    for path in sorted(p for folder in folders for p in folder.glob("*.toml")):
        for key, criterion in claims.load_criteria(path.stem, path.parent).items():
            assert key in ranges.get(path.stem, {}), f"{path.stem}.{key}: no range in ranges.toml"
            low, high = ranges[path.stem][key]
            assert low < high or math.isinf(high), f"{path.stem}.{key}: empty range"
            reachable = claims.reachable_verdicts(criterion, low, high)
            fail, hold = ("not reproduced", "reproduced")
            if criterion.prediction:
                fail, hold = ("not supported", "supported")
            assert fail in reachable, f"{path.stem}.{key} cannot fail in [{low}, {high}]: {sorted(reachable)}"
            assert hold in reachable, f"{path.stem}.{key} cannot hold in [{low}, {high}]: {sorted(reachable)}"


def test_reachable_verdicts_find_a_claim_that_cannot_fail():
    share_below = claims.Criterion("x", "c", "s", "a share", "below", 0.7, partly=1.0)
    assert "not reproduced" not in claims.reachable_verdicts(share_below, 0.0, 1.0)  # at 1.0: inconclusive
    fixed = claims.Criterion("x", "c", "s", "a share", "below", 0.7)
    assert {"reproduced", "not reproduced"} <= claims.reachable_verdicts(fixed, 0.0, 1.0)
    above_edge = claims.Criterion("x", "c", "s", "a count", "above", 0.0)
    assert "reproduced" not in claims.reachable_verdicts(above_edge, -5.0, 0.0)


def test_every_estimator_returns_one_interval_type_written_one_way():
    import torch

    from resid.stats.interval import Interval

    x = torch.tensor([1.0, 2.0, 4.0, 3.0, 5.0, 2.5])
    y = torch.tensor([0.5, 1.5, 3.0, 3.5, 4.0, 2.0])
    estimators = [
        stats.t_interval(x), stats.welch_interval(x, y), stats.wilson_interval(3, 10),
        stats.bootstrap(x, 200), stats.ratio_bootstrap(x, y, 200),
        stats.bootstrap_statistic(stats.pearson, x, y, n_resamples=200),
        stats.resample_interval(torch.tensor([1.0, 0.8, 1.2, 0.9, 1.1])),
    ]  # fmt: skip
    for interval in estimators:
        assert isinstance(interval, Interval)
        estimate, low, high = interval.item()  # floats, from tensors where the estimator keeps them
        assert all(isinstance(v, float) for v in (estimate, low, high)) and low <= estimate <= high
        assert str(interval) == interval.text() == claims.interval_text(estimate, low, high)
    cells = stats.bootstrap(torch.randn(8, 3, 2), 100)  # one interval per cell of a map
    assert isinstance(cells, Interval) and cells.low.shape == (3, 2)
    assert Interval(1.0, float("nan"), 2.0).measured is False and Interval(1.0, 0.5, 2.0).excludes(0.0)
    assert not Interval(1.0, -0.5, 2.0).excludes(0.0)


def test_a_ledger_judges_by_key_asserts_checks_and_saves_both():
    ledger = claims.Ledger("demo", {"x": ABOVE})
    row = ledger.judge("x", stats.Interval(0.8, 0.7, 0.9), "overlap")
    assert row == claims.judge(ABOVE, 0.8, 0.7, 0.9, "overlap 0.8 [0.7, 0.9]")
    assert ledger.verdicts == {"x": "reproduced"} and ledger.estimates == {"x": 0.8}
    with pytest.raises(ValueError, match="already judged"):
        ledger.judge("x", (0.1, 0.0, 0.2))
    with pytest.raises(KeyError, match="no criterion 'y'"):
        ledger.judge("y", (0.1, 0.0, 0.2))
    ledger.check("a sum rule holds", True, "1e-7")
    with pytest.raises(claims.CheckFailed, match="a fold is exact"):
        ledger.check("a fold is exact", False, "0.3")
    assert [c["check"] for c in ledger.checks] == ["a sum rule holds"]  # the failed one stops, unlisted
    saved = ledger.results(quick=True)
    assert saved["chapter"] == "demo" and saved["quick"] and saved["claims"] == [row]
    assert saved["seconds"] >= 0 and len(ledger.claims_table().data) == 1
    assert list(ledger.checks_table().data.columns) == ["check", "detail", "passed"]


def test_equal_measurements_pairs_claims_with_the_same_estimate_and_interval():
    rows = [{"id": "a", "estimate": 0.5, "interval": [0.4, 0.6]},
            {"id": "b", "estimate": 0.5, "interval": [0.4, 0.7]},
            {"id": "c", "estimate": 0.5, "interval": [0.4, 0.6]},
            {"id": "d", "estimate": float("nan"), "interval": [float("nan"), float("nan")]},
            {"id": "e", "estimate": float("nan"), "interval": [float("nan"), float("nan")]}]  # fmt: skip
    assert claims.equal_measurements(rows) == [("a", "c")]


def test_every_pair_of_equal_measurements_in_the_book_is_named_a_repeat_or_a_coincidence():
    import tomllib

    listed = tomllib.loads((ROOT / "notebooks" / "repeats.toml").read_text())
    repeats, coincidences = claims.load_repeats(), listed.get("coincidences", {})
    for path in sorted((ROOT / "book" / "chapters").glob("*.json")):
        name = path.stem
        rows = json.loads(path.read_text()).get("claims", [])
        pairs = claims.equal_measurements(rows)
        for earlier, later in pairs:
            named = repeats.get(name, {}).get(later, {}).get("same_as") == earlier
            named |= [earlier, later] in coincidences.get(name, [])
            assert named, f"{name}: {later} has {earlier}'s number; name it in notebooks/repeats.toml"
        # a listed repeat still measures its claim's number: the same estimate (its interval may
        # differ where a resample picks another runner-up, as the painters' repeat can)
        estimates = {row["id"]: row["estimate"] for row in rows}
        for claim, repeat in repeats.get(name, {}).items():
            same_as = repeat["same_as"]
            assert estimates[claim] == estimates[same_as], f"{name}: {claim} no longer repeats {same_as}"


def test_a_criterion_that_names_a_rule_takes_its_numbers_from_it(tmp_path):
    (tmp_path / "demo.toml").write_text(
        '[a_head]\nclaim = "some head"\nsource = "s"\nmetric = "m"\nrule = "head_of_this_kind"\n'
    )
    rule = claims.load_rules()["head_of_this_kind"]
    criterion = claims.load_criteria("demo", tmp_path)["a_head"]
    assert (criterion.direction, criterion.threshold, criterion.partly) == (
        rule["direction"], rule["threshold"], rule["partly"])  # fmt: skip
    (tmp_path / "demo.toml").write_text(
        '[a_head]\nclaim = "c"\nsource = "s"\nmetric = "m"\nrule = "head_of_this_kind"\nthreshold = 0.2\n'
    )
    with pytest.raises(ValueError, match="names rule"):  # a rule's numbers are not written twice
        claims.load_criteria("demo", tmp_path)
    (tmp_path / "demo.toml").write_text('[a_head]\nclaim = "c"\nsource = "s"\nmetric = "m"\nrule = "nope"\n')
    with pytest.raises(KeyError, match="no rule"):
        claims.load_criteria("demo", tmp_path)


def test_every_claim_a_rule_lists_carries_its_numbers_and_every_exception_differs():
    for name, rule in claims.load_rules().items():
        numbers = (rule["direction"], rule["threshold"], rule.get("partly"))
        for chapter, ids in rule.get("claims", {}).items():
            criteria = claims.load_criteria(chapter)
            for key in ids:
                c = criteria[key]
                assert (c.direction, c.threshold, c.partly) == numbers, (
                    f"{chapter}.{key} does not follow {name}"
                )
        for chapter, exceptions in rule.get("exceptions", {}).items():
            criteria = claims.load_criteria(chapter)
            for key in exceptions:
                c = criteria[key]
                assert (c.direction, c.threshold, c.partly) != numbers, (
                    f"{chapter}.{key} follows {name} after all"
                )


def test_a_row_that_cannot_count_is_named_with_why():
    estimates = {"a": 0.4, "b": 0.4, "c": float("nan"), "d": None, "e": 0.9, "f": 0.2}
    rows = [{"id": claim, "estimate": estimate} for claim, estimate in estimates.items()]
    repeats = {"b": {"same_as": "a", "why": "the same prompts"}}
    apart = {"e": {"kind": "positive control", "why": "it shows the metric can see the effect"}}
    assert claims.not_counted(rows, repeats, apart) == {
        "b": "repeats `a`", "c": claims.NOT_MEASURED, "d": claims.NOT_MEASURED, "e": "positive control"
    }  # fmt: skip
    assert claims.not_counted(rows) == {"c": claims.NOT_MEASURED, "d": claims.NOT_MEASURED}


def test_every_row_set_apart_is_a_claim_of_its_chapter_and_every_unmeasured_row_is_set_apart():
    kinds = {"positive control", "trained on its metric"}
    apart = claims.load_apart()
    assert apart, "notebooks/apart.toml names no row"
    for name, listed in apart.items():
        rows = json.loads((ROOT / "book" / "chapters" / f"{name}.json").read_text())["claims"]
        ids = {row["id"] for row in rows}
        for claim, entry in listed.items():
            assert claim in ids, f"apart.toml: {name} has no claim {claim}"
            assert entry["kind"] in kinds and len(entry["why"].split()) >= 8, (name, claim)
    for path in sorted((ROOT / "book" / "chapters").glob("*.json")):
        rows = json.loads(path.read_text()).get("claims", [])
        reasons = claims.not_counted(rows, claims.load_repeats().get(path.stem), apart.get(path.stem))
        for row in rows:
            if not (isinstance(row.get("estimate"), float) and math.isfinite(row["estimate"])):
                assert reasons.get(row["id"]) in (claims.NOT_MEASURED, *kinds) or row["id"] in reasons, row[
                    "id"
                ]
