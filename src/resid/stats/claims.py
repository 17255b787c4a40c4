"""Claims judged against criteria written down before the run, and checks kept apart from them.

A *claim* is a paper's empirical finding, or a prediction it made, tested on our models. Its
metric, direction and thresholds live in a committed file, ``notebooks/criteria/<chapter>.toml``,
written before the chapter's runs (the file's history is the record); the chapter measures an
estimate with an interval (a bootstrap over prompts for pretrained models, a t-interval over
seeds for trained ones) and ``judge`` turns the two into a verdict. An interval that straddles
a threshold is **inconclusive**.

A *check* is an identity or sanity property (a sum rule, an exact fold, a clean patch changing
nothing): ``check`` asserts it where it is computed, so a failing check fails the chapter, and
lists it apart; it is never counted as a reproduction.

A criteria file::

    [faithful]
    claim = "the circuit alone recovers most of the model's logit difference"
    source = "Wang et al. 2023: 87% for GPT-2 small's IOI circuit"
    metric = "faithfulness F(C) / F(M) on held-out templates"
    direction = "above"        # above | below | within (|estimate| below the threshold)
    threshold = 0.6
    partly = 0.3               # optional: a weaker level that earns "partly"
    prediction = false         # true: the paper proposed it and did not test it
"""

from __future__ import annotations

import math
import os
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from resid.runtime.paths import book_folder

from .interval import Interval

CRITERIA = book_folder("notebooks/criteria")
# The book's runner names the criteria beside the chapter it executes (a draft chapter's are in
# notebooks/drafts/criteria), so that the chapter reads the file its fingerprint covers.
CRITERIA_ENV = "RESID_CRITERIA"
VERDICTS = ("reproduced", "partly", "not reproduced", "inconclusive")
PREDICTION_VERDICTS = ("supported", "partly", "not supported", "inconclusive")


def load_repeats(path: Path | None = None) -> dict[str, dict[str, dict]]:
    """Claims that repeat another claim's measurement, by chapter (``notebooks/repeats.toml``):
    ``{chapter: {claim: {"same_as": other, "why": text}}}``. The results page shows them without
    counting them."""
    path = path or book_folder("notebooks") / "repeats.toml"
    return tomllib.loads(path.read_text()).get("repeats", {}) if path.exists() else {}


def load_apart(path: Path | None = None) -> dict[str, dict[str, dict]]:
    """Claims that cannot count as a replication (``notebooks/apart.toml``): ``{chapter: {claim:
    {"kind": "positive control" | "trained on its metric", "why": text}}}``."""
    path = path or book_folder("notebooks") / "apart.toml"
    return tomllib.loads(path.read_text()).get("apart", {}) if path.exists() else {}


NOT_MEASURED = "not measured"


def not_counted(rows: list[dict], repeats: dict | None = None, apart: dict | None = None) -> dict[str, str]:
    """A chapter's claims that are shown and not counted, by id, each with why in a few words:
    ``"repeats `other`"`` (its ``repeats`` entry), its ``apart`` entry's kind, or "not measured"
    for a row whose estimate is not a finite number (an inconclusive verdict that judged nothing).
    ``repeats`` and ``apart``: the chapter's entries of ``repeats.toml`` and ``apart.toml``."""
    repeats, apart = repeats or {}, apart or {}
    reasons = {}
    for row in rows:
        claim, estimate = row.get("id"), row.get("estimate")
        if claim in repeats:
            reasons[claim] = f"repeats `{repeats[claim]['same_as']}`"
        elif claim in apart:
            reasons[claim] = apart[claim]["kind"]
        elif claim is not None and "estimate" in row and not _finite(estimate):
            reasons[claim] = NOT_MEASURED
    return reasons


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def equal_measurements(rows: list[dict]) -> list[tuple[str, str]]:
    """Pairs of a chapter's claims (earlier, later) with the same estimate and interval: a repeat
    of one measurement, or a coincidence on independent data, which ``repeats.toml`` names."""
    first: dict[tuple, str] = {}
    pairs = []
    for row in rows:
        key = (row["estimate"], *row["interval"])
        if any(isinstance(v, float) and math.isnan(v) for v in key):
            continue  # an unmeasured claim equals nothing
        if key in first:
            pairs.append((first[key], row["id"]))
        else:
            first[key] = row["id"]
    return pairs


class CheckFailed(AssertionError):
    pass


class ClaimRow(TypedDict):
    """One judged claim, as every chapter saves it and the results page reads it."""

    id: str
    claim: str
    paper: str
    ours: str
    criterion: str
    estimate: float
    interval: list[float]
    verdict: str


class CheckRow(TypedDict):
    check: str
    detail: str
    passed: bool


@dataclass(frozen=True)
class Criterion:
    id: str
    claim: str
    source: str
    metric: str
    direction: str
    threshold: float
    partly: float | None = None
    prediction: bool = False

    def __post_init__(self) -> None:
        if self.direction not in ("above", "below", "within"):
            raise ValueError(
                f"criterion {self.id}: direction {self.direction!r}; choose above, below or within"
            )
        if self.partly is not None and self.direction == "within":
            raise ValueError(f"criterion {self.id}: a 'within' criterion has no partly level")
        weaker = self.partly is None or (
            self.partly < self.threshold if self.direction == "above" else self.partly > self.threshold
        )
        if not weaker:
            raise ValueError(f"criterion {self.id}: the partly level must be weaker than the threshold")

    def describe(self) -> str:
        rule = {"above": ">", "below": "<", "within": "|x| <"}[self.direction]
        text = f"{self.metric} {rule} {self.threshold:g}"
        return text + ("" if self.partly is None else f" (partly: {rule} {self.partly:g})")


def load_criteria(chapter: str, folder: Path | None = None) -> dict[str, Criterion]:
    """The chapter's pre-registered criteria, by id: from ``folder``, else from the folder the
    runner names (``$RESID_CRITERIA``), else from ``notebooks/criteria``."""
    folder = folder or Path(os.environ.get(CRITERIA_ENV) or CRITERIA)
    path = folder / f"{chapter}.toml"
    if not path.exists():
        raise FileNotFoundError(f"{path} holds no criteria; write them before the chapter runs")
    table = tomllib.loads(path.read_text())
    rules = load_rules()

    def fields_of(key: str, fields: dict) -> dict:
        if "rule" not in fields:
            return fields
        name = fields.pop("rule")
        if name not in rules:
            raise KeyError(f"criterion {key}: no rule {name!r} in notebooks/rules.toml ({', '.join(rules)})")
        rule = {k: rules[name][k] for k in ("direction", "threshold", "partly") if k in rules[name]}
        if repeated := sorted(set(rule) & set(fields)):
            raise ValueError(f"criterion {key}: names rule {name!r}, which sets {', '.join(repeated)}")
        return rule | fields  # the rule's numbers; the criterion's own fields say what is measured

    return {key: Criterion(id=key, **fields_of(key, dict(fields))) for key, fields in table.items()}


def load_rules(path: Path | None = None) -> dict[str, dict]:
    """The thresholds like claims share (``notebooks/rules.toml``), by rule name: each with its
    meaning, direction, threshold and partly level, the claims that follow it by chapter, and
    the older claims of its kind committed with other numbers (``exceptions``), with why."""
    path = path or book_folder("notebooks") / "rules.toml"
    return tomllib.loads(path.read_text()) if path.exists() else {}


def interval_text(estimate: float, low: float, high: float, what: str = "", fmt: str = ".3g") -> str:
    """``"what 1.23 [0.98, 1.5]"``: ``Interval.text`` for three loose numbers."""
    return Interval(estimate, low, high).text(what, fmt)


def t_interval_text(values) -> str:
    """The mean of ``values`` (one per seed, say) with its 95% t-interval, as ``Interval.text``
    writes it: for a table's cell, e.g. ``frame.groupby("variant")["loss"].agg(t_interval_text)``."""
    import numpy as np

    from .estimators import t_interval  # torch: imported only where an interval is computed

    return t_interval(np.asarray(values, dtype=float)).text()


def judge(criterion: Criterion, estimate: float, low: float, high: float, ours: str = "") -> ClaimRow:
    """A claim row: the criterion, the estimate with its interval, and the verdict. An interval
    that could not be measured (NaN: say, a run that never reached the loss it is read at) is
    inconclusive."""
    unmeasured = math.isnan(low) or math.isnan(high)
    if not unmeasured and not low <= high:
        raise ValueError(f"criterion {criterion.id}: interval [{low}, {high}] is reversed")
    verdict = "inconclusive" if unmeasured else _verdict(criterion, low, high)
    if criterion.prediction:
        verdict = {"reproduced": "supported", "not reproduced": "not supported"}.get(verdict, verdict)
    return ClaimRow(
        id=criterion.id,
        claim=criterion.claim,
        paper=criterion.source,
        ours=ours or Interval(estimate, low, high).text(),
        criterion=criterion.describe(),
        estimate=estimate,
        interval=[low, high],
        verdict=verdict,
    )


def table(rows: list[ClaimRow]):
    """The claims table a chapter shows: claim, paper, ours, criterion, verdict (the rows
    themselves, with estimates and intervals, go into the chapter's results)."""
    import pandas as pd

    return pd.DataFrame(rows)[["claim", "paper", "ours", "criterion", "verdict"]]


def _verdict(c: Criterion, low: float, high: float) -> str:
    if c.direction == "within":
        if -c.threshold < low and high < c.threshold:
            return "reproduced"
        if low > c.threshold or high < -c.threshold:
            return "not reproduced"
        return "inconclusive"
    sign = 1 if c.direction == "above" else -1
    lo, hi = sorted((sign * low, sign * high))  # flipped so that "more is better"
    strong, weak = sign * c.threshold, sign * (c.threshold if c.partly is None else c.partly)
    if lo > strong:
        return "reproduced"
    if hi < weak:
        return "not reproduced"
    if c.partly is not None and lo > weak and hi < strong:
        return "partly"
    return "inconclusive"


def reachable_verdicts(criterion: Criterion, low: float, high: float) -> set[str]:
    """Every verdict the criterion gives to some value of its metric in ``[low, high]`` (the
    metric's range), measured exactly (an interval of width zero). A claim whose criterion
    cannot reach "not reproduced" (or "not supported") cannot fail: it is a check, or its
    threshold sits at the edge of what the metric can be."""
    edges = [criterion.threshold] + ([] if criterion.partly is None else [criterion.partly])
    if criterion.direction == "within":
        edges += [-criterion.threshold]
    step = 1e-6 * max(1.0, *(abs(e) for e in edges))
    candidates = [low, high] + [e + d for e in edges for d in (-step, 0.0, step)]
    candidates = [min(max(x, low), high) for x in candidates if math.isfinite(x)]
    candidates += [x for x in (low, high) if not math.isfinite(x)] and [-1e12, 1e12]
    return {judge(criterion, x, x, x)["verdict"] for x in candidates if low <= x <= high}


def check(name: str, passed: bool, detail: str = "") -> CheckRow:
    """Assert an identity or sanity property where it is computed; a row for the checks table."""
    if not passed:
        raise CheckFailed(f"check failed: {name} ({detail})")
    return CheckRow(check=name, detail=detail, passed=True)


class Ledger:
    """A chapter's verdicts as it computes them: its criteria, the claims judged against them
    and the checks asserted along the way, kept apart, each rendered as a table and saved with
    the chapter's results. ``book.start_chapter`` makes one.

    >>> ledger = Ledger("rmsnorm")                                     # doctest: +SKIP
    >>> ledger.check("the fold is exact", error < 1e-5, f"{error:.1e}")  # doctest: +SKIP
    >>> ledger.judge("trains_as_well", stats.t_interval(differences), "Δ loss")  # doctest: +SKIP
    """

    def __init__(self, chapter: str, criteria: dict[str, Criterion] | None = None) -> None:
        """``criteria`` by id; by default the chapter's file (``load_criteria``)."""
        self.chapter = chapter
        self.criteria = load_criteria(chapter) if criteria is None else criteria
        self.claims: list[ClaimRow] = []
        self.checks: list[CheckRow] = []
        self.started = time.time()  # the chapter's run time, saved with its results

    def check(self, name: str, passed: bool, detail: str = "") -> CheckRow:
        """Assert an identity or sanity property (a failure stops the chapter) and list it."""
        row = check(name, bool(passed), detail)
        self.checks.append(row)
        return row

    def judge(self, key: str, interval: Interval | tuple, what: str = "", fmt: str = ".3g",
              ours: str = "") -> ClaimRow:  # fmt: skip
        """Judge ``interval`` (an estimate with its low and high ends) by the criterion ``key``;
        the row's text is ``what`` followed by the interval, unless ``ours`` says it otherwise."""
        if key not in self.criteria:
            raise KeyError(f"{self.chapter}: no criterion {key!r} (known: {', '.join(self.criteria)})")
        if any(row["id"] == key for row in self.claims):
            raise ValueError(f"{self.chapter}: claim {key!r} is already judged")
        interval = Interval(*interval).item()
        row = judge(self.criteria[key], *interval, ours or interval.text(what, fmt))
        self.claims.append(row)
        order = list(self.criteria)  # the tables follow the criteria file, whatever order judged them
        self.claims.sort(key=lambda claim: order.index(claim["id"]))
        return row

    @property
    def verdicts(self) -> dict[str, str]:
        return {row["id"]: row["verdict"] for row in self.claims}

    @property
    def estimates(self) -> dict[str, float]:
        return {row["id"]: row["estimate"] for row in self.claims}

    def claims_table(self):
        """The claims as a chapter shows them (claim, paper, ours, criterion, verdict), no index."""
        return table(self.claims).style.hide(axis="index")

    def checks_table(self):
        import pandas as pd

        return pd.DataFrame(self.checks, columns=["check", "detail", "passed"]).style.hide(axis="index")

    def results(self, **extra) -> dict:
        """What the chapter saves (``book.save_results``): its name, ``extra``, claims, checks and
        the seconds since the ledger opened."""
        return {"chapter": self.chapter, **extra, "claims": self.claims, "checks": self.checks,
                "seconds": time.time() - self.started}  # fmt: skip
