"""The chapters' exercises, checked: a student's answer against the package's reference, in one
printed line.

Every exercise of every chapter has an entry here, keyed by its number ("2.3"): its title,
what kind of answer it wants, a difficulty (1: a few lines, 2: a short function, 3: a small
investigation) and an estimated time. In a handout (``make handouts``) each exercise has a
starter cell ending in a call of ``check``::

    def my_kurtosis(acts: torch.Tensor) -> float:
        ...

    exercises.check("1.1", my_kurtosis)   # ✓ 1.1 the metric from its formula: ...

An exercise that asks for a prediction first wants it on record before it says anything::

    exercises.predict("1.3", 500)         # recorded; nothing about the answer is shown
    exercises.check("1.3", measured, kurtosis_without, acts=x)

``check`` refuses (without revealing the reference) until ``predict`` has been called; after a
correct answer it shows the reference beside the prediction. Coding answers are tested on
inputs the check builds (a planted pattern, a random matrix) or on the chapter's own model
passed as context, and compared with the package's implementation, never with a stored number.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from resid import stats
from resid.model import Config, Norm, Transformer, hooks, rotate_residual
from resid.model.cache import act_name
from resid.tools import attribution, circuits, das, lenses, lrp, neurons, plans, tda
from resid.train.optim import RotatedAdamW, ScalarAdamW


class Wrong(Exception):
    """What is wrong with an answer, in one line a student can act on."""


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    kind: str  # "code" (a function to write), "predict" (a value to predict), or "code + predict"
    difficulty: int  # 1: a few lines; 2: a short function; 3: a small investigation
    minutes: int  # estimated time, reading the exercise included
    checker: Callable[..., tuple[str, object]]  # raises Wrong; returns (message, reference)
    predicts: str = ""  # what the prediction is of, for exercises that ask for one

    @property
    def chapter(self) -> int:
        return int(self.id.split(".")[0])


EXERCISES: dict[str, Exercise] = {}
_predictions: dict[str, object] = {}


def exercise(id: str, title: str, kind: str, difficulty: int, minutes: int, predicts: str = ""):
    """Register a checker: ``fn(*answer, **context) -> (message, reference)``."""

    def register(fn: Callable[..., tuple[str, object]]) -> Callable[..., tuple[str, object]]:
        if id in EXERCISES:
            raise ValueError(f"exercise {id} is registered twice")
        EXERCISES[id] = Exercise(id, title, kind, difficulty, minutes, fn, predicts)
        return fn

    return register


KIND_WORDS = {"code": "Coding", "code + predict": "Predict, then code and check", "predict": "Prediction"}


def byline(id: str) -> str:
    """The line under an exercise's heading in its chapter: what it asks for, its difficulty
    and its time, from the catalogue (a test holds every chapter to it)."""
    ex = _lookup(id)
    return f"*{KIND_WORDS[ex.kind]} · difficulty {ex.difficulty} of 3 · about {ex.minutes} minutes*"


def predict(id: str, value: object) -> None:
    """Put a prediction on record before checking: nothing about the answer is shown."""
    _lookup(id)
    if value is None or value is Ellipsis:
        print(f"✗ exercise {id}: replace the ... with your prediction")
        return
    if isinstance(value, np.generic | Tensor) and np.ndim(value) == 0:
        value = value.item()  # a NumPy or torch scalar, shown as the number it is
    _predictions[id] = value
    print(f"exercise {id}: prediction recorded ({value!r}); now compute the answer and check it")


def forget_predictions() -> None:
    _predictions.clear()


def check(id: str, *answer, **context) -> bool:
    """Check an answer; print one line saying what passed or what is wrong; True if it passed."""
    ex = _lookup(id)
    head = f"{id} {ex.title}"
    if ex.predicts and id not in _predictions:
        print(
            f"✗ {head}: predict {ex.predicts} first, with exercises.predict({id!r}, ...); "
            "the check shows the answer only after that"
        )
        return False
    if any(a is None or a is Ellipsis for a in answer):
        print(f"✗ {head}: there is no answer yet (replace the ... in the starter cell)")
        return False
    try:
        message, reference = ex.checker(*answer, **context)
    except Wrong as wrong:
        print(f"✗ {head}: {wrong}")
        return False
    except NotImplementedError:
        print(f"✗ {head}: the function is still a stub")
        return False
    except Exception as error:  # the student's code failed: say where, in one line
        print(f"✗ {head}: your answer raised {type(error).__name__}: {error}")
        return False
    if ex.predicts:
        predicted = _predictions[id]
        message += f" You predicted {predicted!r}; the answer is {_shown(reference)}."
        right = prediction_right(predicted, reference)
        if right is False:
            message += " ✗ Your prediction was off: before going on, find what your reasoning missed."
        elif right:
            message += " Your prediction was right."
    print(f"✓ {head}: {message}")
    return True


def catalogue(chapter: int | None = None) -> pd.DataFrame:
    """Every exercise (or one chapter's) with its kind, difficulty and time."""
    rows = [
        {"exercise": e.id, "title": e.title, "kind": e.kind, "difficulty": e.difficulty, "minutes": e.minutes}
        for e in EXERCISES.values()
        if chapter in (None, e.chapter)
    ]
    return pd.DataFrame(rows)


PREDICTION_RTOL = 0.25  # a predicted number within 25% of the answer counts as right


def prediction_right(predicted: object, reference: object, rtol: float = PREDICTION_RTOL) -> bool | None:
    """Whether a prediction matches the answer: a number within ``rtol`` of it (relative), a
    word or set the same (case aside; "yes"/"no" read as True/False), a pair or a dict right in
    every entry. None where the two cannot be compared (the check then says nothing of it)."""
    predicted, reference = _plain(predicted), _plain(reference)
    if isinstance(reference, bool) or isinstance(predicted, bool):
        words = {"yes": True, "true": True, "no": False, "false": False}
        as_bool = [
            words.get(str(v).strip().lower(), v) if isinstance(v, str) else v for v in (predicted, reference)
        ]
        return as_bool[0] == as_bool[1] if all(isinstance(v, bool) for v in as_bool) else None
    if isinstance(reference, int | float) and isinstance(predicted, int | float):
        if not math.isfinite(reference):
            return predicted == reference
        return abs(predicted - reference) <= rtol * abs(reference) + 1e-12
    if isinstance(reference, str) and isinstance(predicted, str):
        return predicted.strip().lower() == reference.strip().lower()
    if isinstance(reference, set | frozenset) and isinstance(predicted, set | frozenset | list | tuple):
        return {str(v).strip().lower() for v in predicted} == {str(v).strip().lower() for v in reference}
    if isinstance(reference, dict) and isinstance(predicted, dict):
        if set(map(str, predicted)) != set(map(str, reference)):
            return False
        by_name = {str(k): v for k, v in predicted.items()}
        judged = [prediction_right(by_name[str(k)], v, rtol) for k, v in reference.items()]
        return None if None in judged else all(judged)
    if isinstance(reference, list | tuple) and isinstance(predicted, list | tuple):
        if len(predicted) != len(reference):
            return False
        judged = [prediction_right(p, r, rtol) for p, r in zip(predicted, reference, strict=True)]
        return None if None in judged else all(judged)
    return None


def _plain(value: object) -> object:
    """A NumPy or torch scalar as the Python number it is; anything else as it is."""
    if isinstance(value, np.generic | Tensor | np.ndarray) and np.ndim(value) == 0:
        return value.item()
    return value


def _lookup(id: str) -> Exercise:
    if id not in EXERCISES:
        raise KeyError(f"no exercise {id!r}; there are {', '.join(EXERCISES)}")
    return EXERCISES[id]


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _as_float64(value) -> Tensor:
    if isinstance(value, Tensor):
        return value.detach().double()
    return torch.tensor(np.array(value, dtype=np.float64))  # a copy: pandas may hand a read-only array


def _close(mine, theirs, what: str, rtol: float = 1e-3, atol: float = 1e-5) -> None:
    mine_t, theirs_t = _as_float64(mine), _as_float64(theirs)
    if mine_t.shape != theirs_t.shape:
        raise Wrong(f"{what} has shape {tuple(mine_t.shape)}, expected {tuple(theirs_t.shape)}")
    if not torch.allclose(mine_t, theirs_t, rtol=rtol, atol=atol):
        gap = (mine_t - theirs_t).abs().max().item()
        raise Wrong(f"{what} differs from the reference (largest gap {gap:.2g})")


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- 1 outliers -------------------------------------------------------------------------------


@exercise("1.1", "the metric from its formula", "code", 1, 10)
def _my_kurtosis(my_kurtosis: Callable[[Tensor], float]):
    g = _generator()
    cases = {
        "Gaussian vectors": torch.randn(256, 64, generator=g),
        "four heavy coordinates": torch.randn(256, 64, generator=g) * torch.tensor([8.0] * 4 + [1.0] * 60),
        "vectors with a large mean of their own": torch.randn(256, 64, generator=g) + 5 * torch.rand(256, 1),
    }
    for what, acts in cases.items():
        _close(float(my_kurtosis(acts)), stats.kurtosis_metric(acts), f"the metric on {what}", rtol=1e-4)
    return "matches resid.stats.kurtosis_metric on Gaussian, heavy-tailed and offset vectors.", None


@exercise("1.2", "a rotation of your own", "code", 2, 15)
def _my_rotation(my_rotation: Callable[[int, torch.Generator], Tensor]):
    g = _generator()
    q = my_rotation(16, g).double()
    if q.shape != (16, 16):
        raise Wrong(f"a 16 x 16 rotation has shape {tuple(q.shape)}")
    if not torch.allclose(q.T @ q, torch.eye(16, dtype=torch.float64), atol=1e-5):
        raise Wrong("Q^T Q is not the identity: the matrix is not orthogonal")
    # Haar-uniform: every entry has mean zero. QR without the sign flip returns Q[0, 0] < 0 always.
    corner = torch.stack([my_rotation(4, g)[0, 0].double() for _ in range(400)])
    if corner.mean().abs() > 0.1:
        raise Wrong(
            f"over 400 draws Q[0, 0] averages {corner.mean():.2f}, not 0: the rotations are "
            "orthogonal but not uniformly distributed (flip the columns where R's diagonal is < 0)"
        )
    return "orthogonal, and uniformly distributed (Q[0, 0] averages 0 over 400 draws).", None


@exercise(
    "1.3",
    "what moves the metric?",
    "code + predict",
    2,
    20,
    predicts="the metric for one coordinate a = 100 among 575 Gaussians",
)
def _what_moves(measured: float, kurtosis_without: Callable[[Tensor, int], float], *, acts: Tensor):
    d, a = 576, 100.0
    formula = d * (a**4 + 3 * (d - 1)) / (a**2 + d - 1) ** 2
    if abs(float(measured) - formula) > 0.05 * formula:
        raise Wrong(
            f"your measurement {float(measured):.0f} is more than 5% from what the formula gives "
            "(set column 0 of a thousand Gaussian 576-vectors to 100)"
        )
    x = acts.reshape(-1, acts.shape[-1])
    largest, typical = stats.massive_activations(x, k=1)[0]["dim"], int(x.abs().median(dim=0).values.argmax())
    without = {}
    for dim in {largest, typical}:
        zeroed, given = x.clone(), x.clone()
        zeroed[:, dim] = 0
        without[dim] = float(kurtosis_without(given, dim))
        if not torch.equal(given, x):
            raise Wrong("kurtosis_without changed the activations it was given: zero a copy")
        _close(without[dim], stats.kurtosis_metric(zeroed), f"the metric without dim {dim}")
    lower = "the median token's" if without[typical] <= without[largest] else "the largest entry's"
    return (
        f"the measurement matches the formula, and zeroing dim {typical} (large on the median token) "
        f"vs dim {largest} (the single largest entry) is computed right: {lower} dimension lowers it "
        "more.",
        formula,
    )


@exercise(
    "1.4",
    "outliers free of scale",
    "code + predict",
    1,
    10,
    predicts='whether scaling the stream by 10 changes its scale-free outlier dimensions ("yes"/"no")',
)
def _scale_free_outliers(scale_free_outliers: Callable[[Tensor, float], Tensor]):
    g = _generator()
    acts = torch.randn(300, 64, generator=g)
    acts[:, 5] *= 4.0  # large everywhere: an outlier on some tokens
    acts[::7, 40] += 30.0  # huge on a few tokens
    quiet, loud = torch.arange(1, 300, 3), torch.arange(0, 300, 3)
    acts[quiet] *= 0.05  # small tokens with an outlier of their own in dim 17, tiny in absolute terms
    acts[quiet[::2], 17] += 0.6
    acts[loud] *= 20.0  # large tokens: an absolute or a global threshold sees only them
    for what, x in {"the activations": acts, "the activations × 10": 10 * acts}.items():
        mine = torch.as_tensor(scale_free_outliers(x, 6.0)).flatten().sort().values
        theirs = stats.outlier_dims(x, 6.0, relative=True)
        if not torch.equal(mine.long(), theirs.long()):
            raise Wrong(
                f"on {what} it finds dims {mine.tolist()}, expected {theirs.tolist()} "
                "(compare each |x_i| with 6 × the RMS of its own token's vector)"
            )
    return "the scale-free test, token by token.", "no"


# --- 2 kurtosis -------------------------------------------------------------------------------


def _heavy_kurtosis_formula(k: int, d: int, s: float) -> float:
    return 3 * d * (k * s**4 + d - k) / (k * s**2 + d - k) ** 2


@exercise(
    "2.1",
    "a formula, and where it fails",
    "code + predict",
    2,
    15,
    predicts="the metric for k = 4 heavy coordinates of d = 128 scaled by s = 8",
)
def _formula(formula: Callable[[int, int, float], float], measured: dict):
    for k, d, s in ((4, 128, 8.0), (1, 64, 3.0), (32, 128, 2.0)):
        _close(
            float(formula(k, d, s)), _heavy_kurtosis_formula(k, d, s), f"the formula at k={k}, d={d}, s={s}"
        )
    gaussian = torch.randn(2048, 128, generator=_generator())
    for k in (1, 4, 16, 32, 64):
        if k not in measured:
            raise Wrong(f"measured has no entry for k = {k}")
        scaled = gaussian.clone()
        scaled[:, :k] *= 8.0
        reference = stats.kurtosis_metric(scaled)
        if abs(float(measured[k]) - reference) > 0.15 * reference:
            raise Wrong(
                f"your metric for k = {k} ({float(measured[k]):.1f}) is far from a measurement of "
                "the same recipe (scale the first k of 128 Gaussian columns by 8)"
            )
    return (
        "formula and measurements right: the formula holds for many heavy coordinates and "
        "overestimates the metric, a mean of per-token ratios, for few.",
        _heavy_kurtosis_formula(4, 128, 8.0),
    )


@exercise("2.2", "when does the basis appear?", "code", 2, 15)
def _first_crossing(first_crossing: Callable[[pd.DataFrame, float], dict]):
    # planted curves: run "a" crosses 5 first at step 200 (in layer 2), "b" never, "c" at step 100
    rows = []
    for run, per_step in {"a": [1, 4, 6, 9], "b": [1, 2, 3, 4.9], "c": [2, 7, 4, 8]}.items():
        for step, peak in zip((0, 100, 200, 300), per_step, strict=True):
            for layer in (1, 2, 3):
                rows.append(
                    {
                        "run": run,
                        "step": step,
                        "layer": layer,
                        "kurtosis": peak if layer == 2 else min(peak, 4.5) - 1,
                    }
                )
    blocks = pd.DataFrame(rows)
    found = {
        run: (None if step is None or pd.isna(step) else int(step))
        for run, step in dict(first_crossing(blocks, 5.0)).items()
    }
    expected = {"a": 200, "b": None, "c": 100}
    if found != expected:
        raise Wrong(f"on planted curves it finds {found}, expected {expected}")
    return "finds the first crossing step, in any layer, and None for a run that never crosses.", None


@exercise(
    "2.3",
    "train and measure a model of your own",
    "code + predict",
    2,
    20,
    predicts='which of "kurtosis" and "rotated" you can be sure of without training',
)
def _own_model(
    boundary_kurtosis: Callable[[Transformer, Tensor], pd.DataFrame], *, model: Transformer, tokens: Tensor
):
    table = boundary_kurtosis(model, tokens)
    with torch.no_grad():
        stream = model.residual_stream(tokens)
    if len(table) != len(stream):
        raise Wrong(f"{len(table)} rows for {len(stream)} layer boundaries (the embedding counts)")
    reference = [stats.kurtosis_metric(acts) for acts in stream]
    _close(table["kurtosis"].to_numpy(dtype=float), reference, "the kurtosis column")
    d = model.cfg.d_model
    gaussian = 3 * (d - 1) / (d + 1)
    if (table["rotated"] - gaussian).abs().max() > 0.5:
        raise Wrong(
            f"the rotated column is not near the Gaussian value {gaussian:.2f}: rotate each token's "
            "vector (acts @ R) before taking the metric"
        )
    return (
        "both columns right; the rotated control sits at the Gaussian value whatever was learned.",
        "rotated",
    )


@exercise(
    "2.4",
    "an interval over seeds",
    "code + predict",
    2,
    15,
    predicts="how many times wider a 3-seed interval is than a 5-seed one with the same sd",
)
def _t_interval(t_interval: Callable):
    g = _generator()
    for n in (2, 3, 5, 10):
        values = torch.randn(n, generator=g, dtype=torch.float64) * 3 + 1
        mine = tuple(float(v) for v in t_interval(values.tolist()))
        _close(mine, stats.t_interval(values), f"(mean, low, high) over {n} values", rtol=1e-4)
    from scipy import stats as scipy_stats

    def half(n: int) -> float:
        return scipy_stats.t.ppf(0.975, n - 1) / n**0.5

    return "Student's t interval, with the sample standard deviation.", half(3) / half(5)


# --- 3 rmsnorm --------------------------------------------------------------------------------


def _reference_gap(norm: torch.nn.Module, x: Tensor, rotation: Tensor) -> float:
    with torch.no_grad():
        return (norm(x @ rotation) - norm(x) @ rotation).abs().max().item()


@exercise(
    "3.1",
    "which norms commute with a rotation?",
    "code + predict",
    1,
    10,
    predicts="the set of norms (of basisfree, rmsnorm, rmsnorm trained, layernorm) that commute",
)
def _commuting_norms(rotation_gap: Callable[[torch.nn.Module, Tensor, Tensor], float]):
    d = 32
    x, rotation = torch.randn(64, d, generator=_generator()), stats.haar_rotation(d, seed=1)
    norms = {kind: Norm(Config(d_model=d, norm=kind)) for kind in ("basisfree", "rmsnorm", "layernorm")}
    trained = Norm(Config(d_model=d, norm="rmsnorm"))
    with torch.no_grad():
        trained.weight.copy_(1 + 0.5 * torch.rand(d, generator=_generator(2)))
    norms["rmsnorm trained"] = trained
    commuting = set()
    for name, norm in norms.items():
        mine, theirs = float(rotation_gap(norm, x, rotation)), _reference_gap(norm, x, rotation)
        _close(mine, theirs, f"the gap of {name}", rtol=1e-2, atol=1e-5)
        if theirs < 1e-4:
            commuting.add(name)
    return "the gaps are right for all four norms.", commuting


@exercise(
    "3.2",
    "fold a gain away",
    "code + predict",
    2,
    15,
    predicts='whether the folded model computes a basis-free function ("yes" or "no")',
)
def _fold_gain(fold_ln2_gain: Callable[[Transformer], Transformer], *, model: Transformer, tokens: Tensor):
    before = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        reference = model.loss(tokens).item()
        folded = fold_ln2_gain(model)
        loss = folded.loss(tokens).item()
    if any(not torch.equal(before[k], v) for k, v in model.state_dict().items()):
        raise Wrong("the function changed the model it was given: fold into a copy (copy.deepcopy)")
    if not torch.all(folded.blocks[0].ln2.weight == 1):
        raise Wrong("blocks[0].ln2's gain is not all ones after folding")
    if abs(loss - reference) > 1e-4:
        raise Wrong(f"the loss moved from {reference:.5f} to {loss:.5f}: scale W_in's columns (W diag(g))")
    return f"the gain is folded and the loss unchanged ({loss:.5f}).", "yes"


@exercise(
    "3.3",
    "count what could pick a basis",
    "code + predict",
    1,
    10,
    predicts="the number of d_model-sized vectors of each model, as a dict",
)
def _per_channel(per_channel_vectors: Callable[[Transformer], list[str]], *, models: dict):
    counts = {}
    for name, model in models.items():
        d = model.cfg.d_model
        reference = sorted(n for n, p in model.named_parameters() if p.shape == (d,))
        mine = sorted(per_channel_vectors(model))
        if mine != reference:
            raise Wrong(
                f"for {name} it lists {len(mine)} vectors, the model has {len(reference)} of size d_model={d}"
            )
        counts[name] = len(reference)
    return "the right parameters for every model.", counts


def _width(interval: tuple[float, float, float]) -> float:
    return interval[2] - interval[1]


@exercise(
    "3.4",
    "why pair by seed?",
    "code + predict",
    2,
    15,
    predicts="how many times wider the unpaired (Welch) interval of the loss difference is than the paired",
)
def _paired_interval(paired_interval: Callable, *, treated: list[float], control: list[float]):
    # Synthetic seeds first: a shared seed effect that pairing cancels and an unpaired interval
    # does not, so an unpaired answer cannot pass by luck.
    g = _generator()
    shared = torch.randn(6, generator=g, dtype=torch.float64)
    a = shared + 0.1 * torch.randn(6, generator=g, dtype=torch.float64) + 0.3
    b = shared + 0.1 * torch.randn(6, generator=g, dtype=torch.float64)
    for x, y, what in ((a, b, "synthetic seeds"), (treated, control, "the chapter's seeds")):
        x, y = _as_float64(x), _as_float64(y)
        mine = tuple(float(v) for v in paired_interval(x.tolist(), y.tolist()))
        _close(mine, stats.t_interval(x - y), f"(mean, low, high) of the differences on {what}", rtol=1e-4)
    differences = _as_float64(treated) - _as_float64(control)
    ratio = _width(stats.welch_interval(treated, control)) / _width(stats.t_interval(differences))
    return "the paired interval is right.", ratio


# --- 4 rotations ------------------------------------------------------------------------------


def _loss_change_class(change: float) -> str:
    return "float noise" if change < 1e-6 else "a little" if change < 0.05 else "a lot"


@exercise(
    "4.1",
    "forget one matrix",
    "code + predict",
    2,
    15,
    predicts='how far the loss moves: "float noise", "a little" or "a lot"',
)
def _forget_one(
    rotate_but_forget: Callable[[Transformer, Tensor], Transformer], *, model: Transformer, tokens: Tensor
):
    model64 = copy.deepcopy(model).double()
    rotation = stats.haar_rotation(model.cfg.d_model, seed=7, dtype=torch.float64)
    with torch.no_grad():
        reference = rotate_residual(model64, rotation)
        reference.blocks[0].mlp.W_out.weight.copy_(model64.blocks[0].mlp.W_out.weight)
        buggy = rotate_but_forget(model64, rotation)
        expected, got = reference.loss(tokens).item(), buggy.loss(tokens).item()
        change = abs(expected - model64.loss(tokens).item())
    if abs(got - expected) > 1e-6 * max(1.0, abs(expected)):
        raise Wrong(
            f"its loss is {got:.6f}; rotating everything, then putting back block 0's unrotated "
            f"W_out, gives {expected:.6f}"
        )
    return f"the buggy rotation is built right: the loss moves by {change:.3g} nats.", _loss_change_class(
        change
    )


@exercise(
    "4.2",
    "the smallest rotation that matters",
    "code + predict",
    2,
    15,
    predicts="the largest entry after the turn as a fraction of before",
)
def _givens(givens: Callable[[int, int, int, float], Tensor]):
    d, i, j, angle = 8, 2, 5, math.pi / 4
    g = givens(d, i, j, angle).double()
    if g.shape != (d, d):
        raise Wrong(f"shape {tuple(g.shape)}, expected {(d, d)}")
    if not torch.allclose(g @ g.T, torch.eye(d, dtype=torch.float64), atol=1e-6):
        raise Wrong("not orthogonal")
    others = [k for k in range(d) if k not in (i, j)]
    if (
        not torch.allclose(g[others][:, others], torch.eye(d - 2, dtype=torch.float64))
        or g[others][:, [i, j]].abs().max() > 0
    ):
        raise Wrong("it touches coordinates other than i and j")
    c, s = math.cos(angle), math.sin(angle)
    if not (abs(g[i, i] - c) < 1e-6 and abs(g[j, j] - c) < 1e-6 and abs(abs(g[i, j]) - s) < 1e-6):
        raise Wrong(f"the plane block is {g[[i, j]][:, [i, j]].tolist()}, expected cos and ±sin of the angle")
    return "a rotation of one plane by the angle, the identity elsewhere.", 2**-0.5


@exercise(
    "4.3",
    "where the computation basis lives",
    "code + predict",
    2,
    15,
    predicts='which tensor has the MLP input\'s kurtosis ("residual", "residual @ R_mlp_in")',
)
def _computation_basis(
    rotated_residual_kurtosis: Callable[[Transformer, Tensor], list[float]],
    *,
    model: Transformer,
    tokens: Tensor,
):
    n = model.cfg.n_layers
    names = [f"blocks.{i}.hook_{p}" for i in range(n) for p in ("resid_mid", "mlp_in")]
    _, cache = model.run_with_cache(tokens, names)
    reference = [
        stats.kurtosis_metric(cache[act_name("resid_mid", i)] @ model.blocks[i].R_mlp_in) for i in range(n)
    ]
    _close([float(v) for v in rotated_residual_kurtosis(model, tokens)], reference, "the kurtosis per block")
    mlp_in = [stats.kurtosis_metric(cache[act_name("mlp_in", i)]) for i in range(n)]
    _close(reference, mlp_in, "the MLP input's kurtosis (a model without R_mlp_in?)")
    return (
        "the residual stream rotated by R_mlp_in has the MLP input's kurtosis, block by block.",
        "residual @ R_mlp_in",
    )


@exercise(
    "4.4",
    "where LayerNorm's mean goes",
    "code + predict",
    2,
    20,
    predicts='how far the loss moves: "float noise", "a little" or "a lot"',
)
def _centre_writes(centre_writes: Callable[[Transformer], Transformer]):
    torch.manual_seed(0)  # a small LayerNorm model with gains and writes away from the defaults
    # untied: with tied embeddings the embedding's rows are also read (by the unembedding), not
    # only written, and centring them changes the logits
    cfg = Config(
        d_model=32, n_layers=2, n_heads=4, d_mlp=64, n_ctx=16, norm="layernorm", tie_embeddings=False
    )
    model = Transformer(cfg).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and "ln" in name:
                p.mul_(1 + 0.3 * torch.rand(p.shape, dtype=p.dtype))
            elif name.endswith(("W_O.weight", "W_out.weight", "embed.weight")):
                p.add_(0.5)  # writes with a large mean across the residual's coordinates
    tokens = torch.randint(0, cfg.vocab_size, (4, 12), generator=_generator(1))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        centred = centre_writes(model)
        if any(not torch.equal(v, model.state_dict()[k]) for k, v in before.items()):
            raise Wrong("it changed the model it was given; return a centred copy")
        change = abs(centred.loss(tokens).item() - model.loss(tokens).item())
        means = centred.residual_stream(tokens).mean(-1).abs().max().item()
        scale = centred.residual_stream(tokens).abs().max().item()
    if means > 1e-9 * max(1.0, scale):
        raise Wrong(
            f"the residual stream's mean over its coordinates reaches {means:.2g}: centre every write "
            "(the token and position embeddings' rows, each output column of W_O and W_out) over the "
            "d_model coordinates"
        )
    if change > 1e-9:
        raise Wrong(f"the loss moved by {change:.2g}: only the writes' means should change")
    return f"every write is centred and the loss moves by {change:.1g} nats.", _loss_change_class(change)


# --- 5 adam -----------------------------------------------------------------------------------


def _steps(make, w: Tensor, grad: Tensor, n: int = 3) -> Tensor:
    p = torch.nn.Parameter(w.clone())
    optimiser = make([p])
    for _ in range(n):
        p.grad = grad.clone()
        optimiser.step()
    return p.detach()


@exercise(
    "5.1",
    "which optimisers commute with a rotation?",
    "code + predict",
    2,
    20,
    predicts="the set of optimisers (of SGD, AdamW, Muon, RotatedAdamW) that commute",
)
def _commuting_optimisers(relative_gap: Callable):
    g = _generator()
    w, grad = torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g)
    p, q = stats.haar_rotation(16, seed=1), stats.haar_rotation(8, seed=2)
    makers = {
        "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
        "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.0),
        "Muon": lambda ps: torch.optim.Muon(ps, lr=0.01, adjust_lr_fn="match_rms_adamw"),
        "RotatedAdamW": lambda ps: RotatedAdamW(ps, lr=0.01, weight_decay=0.0, seed=0),
    }
    commuting = set()
    for name, make in makers.items():
        plain, rotated = _steps(make, w, grad), _steps(make, p.T @ w @ q, p.T @ grad @ q)
        reference = ((p.T @ plain @ q - rotated).abs().max() / (plain - w).abs().max()).item()
        mine = float(relative_gap(make, w, grad, p, q))
        if abs(mine - reference) > 0.05 * max(reference, 1e-3):
            raise Wrong(
                f"the gap for {name} is {mine:.3g}; three steps on (W, G) and on (PᵀWQ, PᵀGQ) give "
                "another (compare Pᵀ W_new Q with the rotated run's result, relative to the step)"
            )
        if reference < 0.05:
            commuting.add(name)
    return "the relative gap is right for all four optimisers.", commuting


@exercise(
    "5.2",
    "Adam's first step",
    "code + predict",
    1,
    10,
    predicts="the cosine between AdamW's first step and a Gaussian gradient",
)
def _adam_first_step(first_step: Callable[[Tensor, float], Tensor]):
    g = torch.randn(64, 32, generator=_generator())
    w = torch.zeros(64, 32)
    actual = _steps(lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.0), w, g, n=1) - w
    _close(first_step(g, 0.01), actual, "your first step", rtol=1e-3, atol=1e-6)
    return "your formula is AdamW's first update.", math.sqrt(2 / math.pi)


@exercise("5.3", "where the energy sits", "code", 1, 10)
def _top4(top4_share: Callable[[Tensor], float]):
    g = _generator()
    cases = {
        "Gaussian": torch.randn(512, 64, generator=g),
        "one heavy coordinate": torch.randn(512, 64, generator=g) * torch.tensor([10.0] + [1.0] * 63),
        "a signed offset": torch.randn(512, 64, generator=g) - 3.0,
    }
    for what, acts in cases.items():
        _close(float(top4_share(acts)), stats.top_energy_share(acts, 4), f"the share on {what}", rtol=1e-4)
    return "matches resid.stats.top_energy_share.", None


@exercise(
    "5.4",
    "one second moment per matrix",
    "code + predict",
    2,
    15,
    predicts='whether its step on a rotated gradient differs from the rotated step ("yes"/"no")',
)
def _scalar_adam(scalar_adam: Callable[[Tensor, list[Tensor], float, tuple, float], Tensor]):
    g = _generator(5)
    W = torch.randn(6, 4, generator=g, dtype=torch.float64)
    grads = [torch.randn(6, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    lr, betas, eps = 0.01, (0.9, 0.999), 1e-8
    p = torch.nn.Parameter(W.clone())
    optimiser = ScalarAdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=0.0)
    for grad in grads:
        p.grad = grad.clone()
        optimiser.step()
    _close(scalar_adam(W.clone(), [grad.clone() for grad in grads], lr, betas, eps), p.detach(),
           "the weights after three steps", rtol=1e-6, atol=1e-9)  # fmt: skip
    return "one running mean of the squared gradient per matrix: a rotated problem, a rotated step.", "no"


# --- 6 attribution ----------------------------------------------------------------------------


@exercise("6.1", "gradient × input by hand", "code", 2, 15)
def _grad_x_input(gradient_x_input: Callable, *, model: Transformer, tokens: Tensor, target: int, foil: int):
    tokens = tokens.reshape(1, -1)
    table, _ = attribution.input_attributions(model, tokens, target, foil, ig_steps=2)
    mine = torch.as_tensor(gradient_x_input(model, tokens, target, foil)).detach().flatten()
    if len(mine) != tokens.shape[1]:
        raise Wrong(f"{len(mine)} scores for {tokens.shape[1]} positions: one per position")
    _close(
        mine[torch.tensor(table["position"].to_list())],
        table["gradient x input"].to_numpy(dtype=float),
        "gradient × input",
        rtol=1e-3,
        atol=1e-4,
    )
    return "equals resid.attribution's at every position.", None


def _right_riemann_ig(
    score: Callable[[Tensor], Tensor], inputs: Tensor, baseline: Tensor, steps: int
) -> Tensor:
    alphas = torch.arange(1, steps + 1, dtype=inputs.dtype) / steps
    path = (
        (baseline + alphas.view(-1, 1, 1) * (inputs - baseline)).detach().requires_grad_()
    )  # [step, pos, d]
    (gradient,) = torch.autograd.grad(score(path).sum(), path)
    return ((inputs - baseline)[0] * gradient.mean(0)).sum(-1).detach()  # [pos]


@exercise(
    "6.2",
    "integrated gradients by hand",
    "code + predict",
    2,
    20,
    predicts="the completeness error |sum of IG - (f(x) - f(baseline))| / |f(x) - f(baseline)| at 16 steps",
)
def _integrated_gradients(
    integrated_gradients: Callable,
    *,
    score: Callable[[Tensor], Tensor],
    inputs: Tensor,
    baseline: Tensor,
    steps: int = 16,
):
    inputs, baseline = inputs.detach(), baseline.detach()
    reference = _right_riemann_ig(score, inputs, baseline, steps)
    mine = torch.as_tensor(integrated_gradients(score, inputs, baseline, steps)).detach().flatten()
    if len(mine) != inputs.shape[1]:
        raise Wrong(f"{len(mine)} scores for {inputs.shape[1]} positions: one per position")
    _close(mine, reference, f"your {steps}-step integrated gradients", rtol=1e-3, atol=1e-4)
    with torch.no_grad():
        change = (score(inputs) - score(baseline)).item()
    error = abs(reference.sum().item() - change) / max(abs(change), 1e-12)
    return (
        f"the right Riemann sum at every position: they add up to {reference.sum():.3f}, "
        f"f changes by {change:.3f}.",
        error,
    )


@exercise("6.3", "the area over a deletion curve", "code", 1, 10)
def _deletion_area(deletion_area: Callable[[list[float]], float]):
    curves = {
        "a falling curve": [2.0, 1.0, 0.5, 0.0],
        "a negative score": [-1.5, -1.0, -0.5],
        "a curve that rises": [0.5, 1.5, 1.0, 0.25, 0.5],
    }
    for what, curve in curves.items():
        _close(float(deletion_area(list(curve))), lrp.deletion_area(curve), f"the area of {what}", rtol=1e-6)
    return "equals resid.lrp.deletion_area on every curve.", None


@exercise(
    "6.4",
    "one head's direct effect, by hand",
    "code + predict",
    3,
    25,
    predicts='whether ablating the head would lower the logit difference by exactly its DLA ("yes"/"no")',
)
def _head_dla(
    head_dla: Callable,
    *,
    model: Transformer,
    tokens: Tensor,
    answers: Tensor,
    foils: Tensor,
    layer: int,
    head: int,
):
    table, _ = attribution.direct_logit_attribution(model, tokens, answers, foils)
    reference = table.loc[table.component == f"L{layer}H{head}", "dla"].item()
    _close(
        float(head_dla(model, tokens, answers, foils, layer, head)),
        reference,
        f"L{layer}H{head}'s direct effect",
        rtol=1e-3,
        atol=1e-4,
    )
    return f"L{layer}H{head}: {reference:+.4f}, as resid.attribution has it.", "no"


@exercise(
    "6.5",
    "the lens at both ends",
    "code + predict",
    2,
    15,
    predicts="the token the lens ranks first at boundary 0 (its text)",
)
def _lens(
    lens_readout: Callable[[Transformer, Tensor], Tensor],
    *,
    model: Transformer,
    tokens: Tensor,
    decode: Callable[[list[int]], str] = str,
):
    with torch.no_grad():
        readout = lens_readout(model, tokens)
        stream = model.residual_stream(tokens).view(-1, *tokens.shape, model.cfg.d_model)[:, :, -1]
        reference = model.unembed(model.ln_final(stream))
    _close(readout.float(), reference.float(), "the readout [boundary, prompt, vocab]", rtol=1e-3, atol=1e-3)
    first = decode([int(reference[0, 0].argmax())])
    return "the readout is right at every boundary; at the last it is the model's output.", first


# --- 7 patching -------------------------------------------------------------------------------


@exercise(
    "7.1",
    "the first row, exactly",
    "predict",
    1,
    10,
    predicts="the sum over positions of the lost fractions 1 - recovered at layer 0",
)
def _first_row(lost_sum: float, *, recovered_row: Tensor):
    reference = (1 - recovered_row).sum().item()
    _close(float(lost_sum), reference, "the sum of 1 - recovered over the row", atol=1e-3)
    return "nothing is lost where the prompts agree; all of it where they differ.", reference


@exercise(
    "7.2",
    "patch one head by hand, and patch with the clean value",
    "code + predict",
    3,
    25,
    predicts="the largest change when every head is patched with its own clean value",
)
def _patch_one_head(
    resample_head: Callable,
    *,
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor,
    metric: Callable[[Tensor], Tensor],
    layer: int,
    head: int,
):
    name = act_name("z", layer)
    _, cache = model.run_with_cache(counterfactual, [name])
    with torch.no_grad():
        patched = model.run_with_hooks(clean, hooks.replace_heads([(layer, head)], {layer: cache[name]}))
        reference = metric(patched[:, -1]).mean().item()
        clean_value = metric(model(clean)[:, -1]).mean().item()
    mine = float(resample_head(model, clean, counterfactual, metric, layer, head))
    is_change = abs(mine - (reference - clean_value)) < 1e-3
    if abs(mine - reference) > 1e-3 * max(1.0, abs(reference)) and is_change:
        raise Wrong("your value is the change of the metric; return the metric itself after patching")
    _close(mine, reference, f"the metric with L{layer}H{head} resampled", atol=1e-3)
    return f"L{layer}H{head} resampled by hand equals the package's patch (hooks.replace_heads).", 0.0


@exercise(
    "7.3",
    "the two ends of a circuit",
    "predict",
    1,
    10,
    predicts="the fraction recovered with every edge kept, and with none, as a pair",
)
def _two_ends(all_kept: float, none_kept: float):
    if abs(float(all_kept) - 1) > 1e-3 or abs(float(none_kept)) > 1e-3:
        raise Wrong(
            f"got {float(all_kept):.4f} and {float(none_kept):.4f}: compute both with small_recovered"
        )
    return "every edge recovers the clean run, no edge the counterfactual's.", (1.0, 0.0)


@exercise("7.4", "denoise one position by hand", "code", 2, 20)
def _patch_position(
    patch_position: Callable,
    *,
    model: Transformer,
    clean: Tensor,
    counterfactual: Tensor,
    metric: Callable[[Tensor], Tensor],
    layer: int,
    position: int,
):
    name = act_name("resid_pre", layer)
    _, cache = model.run_with_cache(counterfactual, [name])

    def patch(resid: Tensor, hook) -> Tensor:
        resid = resid.clone()
        resid[:, position] = cache[name][:, position]
        return resid

    with torch.no_grad():
        reference = metric(model.run_with_hooks(clean, [(name, patch)])[:, -1]).mean().item()
        mine = float(patch_position(model, clean, counterfactual, metric, layer, position))
    _close(
        mine,
        reference,
        f"the metric with the residual at layer {layer}, position {position} patched",
        atol=1e-3,
    )
    return (
        f"layer {layer}, position {position}: the counterfactual's residual, patched into the clean run.",
        None,
    )


# --- 8 heads ----------------------------------------------------------------------------------


@exercise("8.1", "an induction score of your own", "code", 2, 15)
def _induction_score(induction_score: Callable[[Tensor, int], float]):
    batch, n, period = 3, 12, 5
    queries = torch.arange(n - period, n)
    planted = torch.zeros(batch, n, n)
    planted[:, queries, queries - period + 1] = 1.0  # a perfect induction head
    if abs(float(induction_score(planted, period)) - 1) > 1e-6:
        raise Wrong("a head attending exactly to the token after the previous occurrence should score 1")
    previous = torch.zeros(batch, n, n)
    previous[:, torch.arange(1, n), torch.arange(n - 1)] = 1.0
    previous[:, 0, 0] = 1.0
    if abs(float(induction_score(previous, period))) > 1e-6:
        raise Wrong("a previous-token head should score 0: read the key q - period + 1, not q - 1")
    causal = torch.tril(torch.ones(n, n))
    uniform = (causal / causal.sum(-1, keepdim=True)).expand(batch, n, n)
    reference = uniform[:, queries, queries - period + 1].mean().item()
    _close(float(induction_score(uniform, period)), reference, "the score of uniform attention")
    return "1 for a planted induction head, 0 for a previous-token head, right on uniform attention.", None


@exercise(
    "8.2",
    "how low can the first pass go?",
    "predict",
    1,
    10,
    predicts="the lowest mean first-pass loss for 256 uniformly random bytes",
)
def _first_pass_bound(bound: float):
    _close(float(bound), math.log(256), "your bound", atol=1e-3)
    return "the entropy of a uniform choice, ln K nats.", math.log(256)


@exercise("8.3", "read a copying score off the OV circuit", "code", 1, 10)
def _copying_score(copying_score: Callable[[Tensor], float]):
    g = _generator()
    copier = torch.randn(20, 20, generator=g) + 10 * torch.eye(20)
    noise = torch.randn(20, 20, generator=g)
    suppressor = torch.randn(20, 20, generator=g) - 10 * torch.eye(20)
    for what, ov in {"a copier": copier, "noise": noise, "a suppressor": suppressor}.items():
        reference = (ov.argmax(1) == torch.arange(20)).float().mean().item()
        _close(float(copying_score(ov)), reference, f"the score of {what}")
    return "1 for a planted copier, 0 for a suppressor, the right fraction on noise.", None


@exercise("8.4", "a previous-token score of your own", "code", 1, 10)
def _previous_token_score(previous_token_score: Callable[[Tensor], float]):
    batch, n = 3, 10
    previous = torch.zeros(batch, n, n)
    previous[:, torch.arange(1, n), torch.arange(n - 1)] = 1.0
    previous[:, 0, 0] = 1.0
    if abs(float(previous_token_score(previous)) - 1) > 1e-6:
        raise Wrong("a head attending exactly to the previous token should score 1 (leave out query 0)")
    own = torch.eye(n).expand(batch, n, n)
    if abs(float(previous_token_score(own))) > 1e-6:
        raise Wrong("a head attending to its own position should score 0")
    causal = torch.tril(torch.ones(n, n))
    uniform = (causal / causal.sum(-1, keepdim=True)).expand(batch, n, n)
    q = torch.arange(1, n)
    _close(
        float(previous_token_score(uniform)), uniform[:, q, q - 1].mean().item(), "uniform attention's score"
    )
    return "1 for a planted previous-token head, 0 for attention to itself, right on uniform attention.", None


# --- 9 painters -------------------------------------------------------------------------------


@exercise(
    "9.1",
    "plans that are the same plan",
    "predict",
    1,
    10,
    predicts="for parallel(10, 10), middle_repeat(10, 10), parallel(10, 11): is each the full model",
)
def _same_plans(identical: dict, *, model: Transformer, tokens: Tensor, first: int = 10):
    n = model.cfg.n_layers
    full = plans.run_plan(model, tokens, plans.identity(n))
    candidates = {
        "parallel(10, 10)": plans.parallel(n, first, first),
        "middle_repeat(10, 10)": plans.middle_repeat(n, first, first),
        "parallel(10, 11)": plans.parallel(n, first, first + 1),
    }
    reference = {
        name: bool(torch.equal(plans.run_plan(model, tokens, plan), full))
        for name, plan in candidates.items()
    }
    mine = {name: bool(identical.get(name)) for name in candidates}
    if mine != reference:
        raise Wrong(
            f"you found {mine}; run_plan says otherwise for "
            f"{[k for k in candidates if mine[k] != reference[k]]}"
        )
    return "found which plans compute the full model.", reference


def _reference_parallel(model: Transformer, tokens: Tensor, first: int, last: int) -> tuple[Tensor, Tensor]:
    context = model.context(tokens.shape[1])
    x = model.embed_tokens(tokens)
    for block in model.blocks[:first]:
        x = block(x, *context)
    return x, torch.stack([model.blocks[i](x, *context) for i in range(first, last + 1)]).mean(0)


@exercise("9.2", "a parallel step by hand", "code", 2, 20)
def _parallel_by_hand(
    parallel_logits: Callable, *, model: Transformer, tokens: Tensor, first: int, last: int
):
    with torch.no_grad():
        mine = parallel_logits(model, tokens, first, last)
    reference = plans.run_plan(model, tokens, plans.parallel(model.cfg.n_layers, first, last))
    _close(mine.float(), reference.float(), "your logits", rtol=1e-3, atol=1e-3)
    return "the same logits as plans.parallel.", None


@exercise(
    "9.3",
    "why a parallel step needs loops",
    "code + predict",
    2,
    15,
    predicts="how many times larger the sequential blocks' update is than the parallel step's",
)
def _update_norms(update_norms: Callable, *, model: Transformer, tokens: Tensor, first: int, last: int):
    with torch.no_grad():
        x, parallel_out = _reference_parallel(model, tokens, first, last)
        context = model.context(tokens.shape[1])
        sequential = x
        for i in range(first, last + 1):
            sequential = model.blocks[i](sequential, *context)
        reference = (
            (parallel_out - x).float().norm(dim=-1).median().item(),
            (sequential - x).float().norm(dim=-1).median().item(),
        )
        mine = tuple(float(v) for v in update_norms(model, tokens, first, last))
    _close(mine, reference, "(parallel, sequential) median update norms", rtol=1e-3, atol=1e-3)
    return "both update norms right.", reference[1] / reference[0]


@exercise(
    "9.4",
    "a plan of your own: the middle painted twice",
    "code + predict",
    2,
    15,
    predicts='which costs more next-token loss: the middle blocks run twice, or skipped ("twice"/"skip")',
)
def _middle_twice(
    middle_twice: Callable[[int, int, int], plans.Plan],
    *,
    model: Transformer,
    tokens: Tensor,
    first: int,
    last: int,
):
    n = model.cfg.n_layers
    order = list(range(last + 1)) + list(range(first, last + 1)) + list(range(last + 1, n))
    mine = tuple(middle_twice(n, first, last))
    if not all(isinstance(step, plans.Step) for step in mine):
        raise Wrong("a plan is a tuple of plans.Step: build it with plans.sequential([...])")
    if [step.layers for step in mine] != [(i,) for i in order] or any(step.loops != 1 for step in mine):
        raise Wrong(
            f"the plan runs {[step.layers for step in mine]}; blocks {first}..{last} should run twice, "
            "in order"
        )
    full, twice, skipped = plans.run_plans(
        model, tokens, [plans.identity(n), mine, plans.skip(n, first, last)]
    )

    def loss(logits: Tensor) -> float:  # next-token cross-entropy over the windows
        return torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten()
        ).item()

    costs = {"twice": loss(twice) - loss(full), "skip": loss(skipped) - loss(full)}
    return (
        f"blocks {first}..{last} run twice: loss {costs['twice']:+.3f} nats; skipped: {costs['skip']:+.3f}.",
        max(costs, key=costs.get),
    )


# --- 10 ioi -----------------------------------------------------------------------------------


@exercise("10.1", "a name mover's attention, read off the cache", "code", 1, 10)
def _attention_at(attention_at: Callable[[Tensor, Tensor, Tensor], float]):
    g = _generator()
    pattern = torch.softmax(torch.randn(6, 9, 9, generator=g), -1)  # [batch, query, key]
    queries, keys = torch.tensor([8, 7, 8, 6, 8, 5]), torch.tensor([2, 3, 1, 2, 4, 0])
    reference = pattern[torch.arange(6), queries, keys].mean().item()
    swapped = pattern[torch.arange(6), keys, queries].mean().item()
    mine = float(attention_at(pattern, queries, keys))
    if abs(mine - swapped) < 1e-6 and abs(mine - reference) > 1e-6:
        raise Wrong("you read [key, query]: the pattern is [batch, query, key]")
    _close(mine, reference, "the mean attention")
    return "the mean of each prompt's own query-to-key entry.", None


@exercise(
    "10.2",
    "the circuit without its name movers",
    "predict",
    2,
    15,
    predicts='whether the rest of the circuit still prefers IO ("yes"/"no")',
)
def _without_movers(
    kept: float, *, model: Transformer, prompts, circuit: list, name_movers: list, means: list
):
    rest = [h for h in circuit if h not in name_movers]
    outside = [h for h in circuits.all_heads(model) if h not in rest]
    reference = circuits.ablated_logit_diff(model, prompts, outside, means).mean().item()
    if abs(float(kept) - reference) > 1e-3 * max(1.0, abs(reference)):
        raise Wrong(
            f"your logit difference {float(kept):.3f} is not the circuit's without its name movers "
            "(ablate every head outside the circuit minus the movers)"
        )
    return f"the rest keeps a logit difference of {reference:.2f}.", "yes" if reference > 0 else "no"


@exercise("10.3", "a neuron's value vector by hand", "code", 1, 10)
def _value_vector(
    value_logits: Callable[[Transformer, int, int], Tensor], *, model: Transformer, layer: int, neuron: int
):
    with torch.no_grad():
        mine = value_logits(model, layer, neuron)
    reference = neurons.value_logits(model, layer, torch.tensor([neuron]))[0]
    _close(torch.as_tensor(mine).float().flatten(), reference.float(), "the value vector's logits", atol=1e-4)
    return "equals neurons.value_logits.", None


@exercise("10.4", "the circuit alone, with a hook of your own", "code", 2, 20)
def _circuit_alone(circuit_alone: Callable, *, model: Transformer, prompts, circuit: list, means: list):
    outside = [h for h in circuits.all_heads(model) if h not in set(circuit)]
    reference = circuits.ablated_logit_diff(model, prompts, outside, means)
    with torch.no_grad():
        mine = torch.as_tensor(circuit_alone(model, prompts, circuit, means)).detach().float().flatten()
    _close(mine, reference, "the logit difference per prompt", rtol=1e-3, atol=1e-3)
    return (
        f"every head outside the {len(circuit)} mean-ablated: logit difference {reference.mean():.2f} on "
        f"average, as circuits.ablated_logit_diff has it.",
        None,
    )


@exercise("10.5", "an interchange intervention by hand", "code", 1, 10)
def _interchange(interchange: Callable[[Tensor, Tensor, Tensor], Tensor]):
    g = _generator()
    base, source = torch.randn(5, 12, generator=g), torch.randn(5, 12, generator=g)
    for what, basis in {
        "a rotated plane": das.random_basis(12, 2, seed=3),
        "two coordinates": das.coordinate_basis(12, [1, 7]),
    }.items():
        _close(
            interchange(base, source, basis),
            das.interchange(base, source, basis),
            f"the interchange on {what}",
            atol=1e-5,
        )
    return "the subspace's part from the source, the rest from the base, on any orthonormal basis.", None


# --- 11 catalogue -----------------------------------------------------------------------------


@exercise("11.1", "the eigenvalue sign of an OV circuit", "code", 1, 10)
def _eigenvalue_sign(eigenvalue_sign: Callable[[Tensor], float]):
    for what, ov, expected in (
        ("the identity (a head that writes what it reads)", torch.eye(6), 1.0),
        ("minus the identity (a head that erases it)", -torch.eye(6), -1.0),
        ("a quarter turn (eigenvalues ±i: neither)", torch.tensor([[0.0, -1.0], [1.0, 0.0]]), 0.0),
        ("a projection onto two of four coordinates", torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0])), 1.0),
    ):
        _close(float(eigenvalue_sign(ov)), expected, f"the sign of {what}", atol=1e-6)
    random_ov = torch.randn(16, 4, generator=_generator(1)) @ torch.randn(4, 16, generator=_generator(2))
    eigenvalues = torch.linalg.eigvals(random_ov.double())
    _close(float(eigenvalue_sign(random_ov)), (eigenvalues.real.sum() / eigenvalues.abs().sum()).item(),
           "the sign of a random rank-4 circuit", atol=1e-6)  # fmt: skip
    return "+1 for copying, -1 for erasing, 0 for a rotation, the right value on a random circuit.", None


@exercise("11.2", "how much of a neuron position explains", "code", 1, 10)
def _position_share(position_share: Callable[[Tensor], float]):
    g = _generator()
    noise = torch.randn(40, 30, generator=g)
    by_position = torch.linspace(-2, 2, 30).expand(40, 30).clone()
    for what, acts in {
        "a neuron that follows position alone": by_position,
        "noise": noise,
        "position plus noise": by_position + noise,
    }.items():
        reference = neurons.position_shares(acts[:, :, None], first=0).item()
        _close(float(position_share(acts)), reference, f"the share for {what}", atol=1e-5)
    return "1 for a neuron that follows position, near 0 for noise, right in between.", None


@exercise(
    "11.3",
    "anisotropy without the pairs",
    "code + predict",
    2,
    15,
    predicts='whether zeroing 16 random coordinates of 576 changes the anisotropy much ("yes"/"no")',
)
def _cross_window_cosine(cross_window_cosine: Callable[[Tensor], float]):
    g = _generator()
    shared = torch.randn(24, generator=g)
    for what, scale in {"isotropic vectors": 0.0, "vectors sharing a direction": 2.0}.items():
        vectors = torch.randn(6, 9, 24, generator=g, dtype=torch.float64) + scale * shared.double()
        unit = torch.nn.functional.normalize(vectors, dim=-1)
        _close(float(cross_window_cosine(unit)), stats.cross_window_cosine(unit), f"the anisotropy of {what}")
    return "the mean cosine over pairs from different windows, pairs within a window left out.", "no"


@exercise(
    "11.4",
    "a syntactic score by hand",
    "code + predict",
    2,
    15,
    predicts='a previous-token head\'s syntactic score ("positive", "about zero" or "negative")',
)
def _syntactic_score(syntactic_score: Callable[[Tensor, int, int], float]):
    g = _generator(11)
    for length, subject, first in ((6, 3, 1), (9, 2, 1), (12, 5, 0)):
        row = torch.rand(length, generator=g, dtype=torch.float64)
        row /= row.sum()  # one query's attention weights over the keys up to itself
        others = [k for k in range(first + 1, length - 1) if k != subject]
        reference = (row[subject] - row[others].mean()).item()
        what = f"the score of a row of {length} keys (subject at {subject}, first at {first})"
        _close(float(syntactic_score(row, subject, first)), reference, what, atol=1e-6)
    previous = torch.zeros(8, dtype=torch.float64)
    previous[6] = 1.0  # the query (7) attends to the key before it, which is not the subject
    value = float(syntactic_score(previous, 3, 1))
    return (
        f"the weight on the subject minus the mean on the other keys; a previous-token head: {value:+.2f}.",
        "negative",
    )


# --- 12 training data attribution ---------------------------------------------------------------


def _tiny_trained(seed: int = 0):
    """A tiny model with one checkpoint (its initial weights) and windows to score."""
    torch.manual_seed(seed)
    model = Transformer(Config(vocab_size=256, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_mlp=16))
    windows = torch.randint(97, 123, (7, 9), generator=_generator(seed))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    return tda.Trained(model, [(state, 0.05)], []), windows[:5], windows[5:]


@exercise("12.1", "TracIn at one checkpoint, by hand", "code", 1, 15)
def _tracin_step(tracin_step: Callable[[Transformer, float, Tensor, Tensor], Tensor]):
    trained, train, test = _tiny_trained()
    reference = tda.tracin(trained, train, test)
    mine = tracin_step(trained.model, 0.05, train, test)
    _close(mine, reference, "TracIn's scores [test, train]", rtol=1e-3, atol=1e-6)
    return "the learning rate times the dot product of the two windows' loss gradients.", None


@exercise("12.2", "the damped inverse without the big matrix", "code", 2, 15)
def _damped_solve(damped_solve: Callable[[Tensor, Tensor, float], Tensor]):
    g = _generator(3)
    for n, p in ((4, 30), (9, 12)):  # fewer rows than parameters, and nearly as many
        rows = torch.randn(n, p, generator=g, dtype=torch.float64)
        v = torch.randn(p, generator=g, dtype=torch.float64)
        reference = torch.linalg.solve(rows.T @ rows / n + 0.1 * torch.eye(p, dtype=torch.float64), v)
        _close(
            damped_solve(rows, v, 0.1), reference, f"(J^T J / n + d I)^-1 v for J of shape {n}x{p}", atol=1e-8
        )
    return "an n x n solve instead of a P x P one: the same vector.", None


@exercise(
    "12.3",
    "one checkpoint or four",
    "code + predict",
    2,
    20,
    predicts="whether TracIn with the last checkpoint alone still puts every planted window in its top 8 "
    'for every artefact prompt ("yes"/"no")',
)
def _last_checkpoint(last_checkpoint_tracin: Callable, *, trained, train: Tensor, prompts: Tensor, last: int,
                     planted: list[int]):  # fmt: skip
    only_last = tda.Trained(trained.model, trained.checkpoints[-1:], trained.losses)
    reference = tda.tracin(only_last, train, prompts, last)
    _close(last_checkpoint_tracin(trained, train, prompts, last), reference, "the one-checkpoint scores",
           rtol=1e-3, atol=1e-6)  # fmt: skip
    all_found = bool((tda.planted_recall(reference, planted) == 1).all())
    return "the final checkpoint's gradients alone.", "yes" if all_found else "no"


@exercise(
    "12.4",
    "what random removal costs",
    "predict",
    1,
    10,
    predicts="the mean test loss rise, in nats, when 16 random training windows are removed",
)
def _random_rise(mean_rise: float, *, random_rises: list[float]):
    reference = float(np.mean(random_rises))
    _close(float(mean_rise), reference, "the mean rise over the random removals", atol=1e-6)
    return "retraining without any windows moves every later batch, so the loss moves too.", reference


# --- 13 lenses ---


@exercise("13.1", "the KL a lens is judged by", "code", 1, 10)
def _kl_from_final(kl_from_final: Callable[[Tensor, Tensor], Tensor]):
    g = _generator(13)
    final, lens = 3 * torch.randn(6, 50, generator=g), 3 * torch.randn(6, 50, generator=g)
    _close(
        kl_from_final(final, lens), lenses.kl_terms(final, lens), "KL(final || lens) per position", atol=1e-5
    )
    return "the final distribution weighs the log-ratio: a lens is penalised where the model puts mass.", None


@exercise("13.2", "a translator by least squares", "code", 2, 15)
def _fit_translator(fit_translator: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]):
    g = _generator(14)
    h = torch.randn(300, 6, generator=g)
    final = (
        h @ torch.randn(6, 6, generator=g)
        + torch.randn(6, generator=g)
        + 0.1 * torch.randn(300, 6, generator=g)
    )
    reference = lenses.least_squares_start(torch.stack([h, final]))
    weight, bias = fit_translator(h, final)
    _close(weight, reference.weight[0], "A (applied as h @ A, with h + h @ A + b the translation)", atol=1e-4)
    _close(bias, reference.bias[0], "b", atol=1e-4)
    return "the residual connection stays: the translator learns only what the later blocks add.", None


@exercise(
    "13.3",
    "where the answer stays on top",
    "code + predict",
    2,
    15,
    predicts="the share of the capital prompts that the tuned lens decodes before the last block (0 to 1)",
)
def _first_decoding(first_decoding: Callable[[Tensor], Tensor], *, top1: Tensor):
    g = _generator(15)
    for table in (torch.rand(7, 20, generator=g) < 0.7, torch.rand(5, 9, generator=g) < 0.3, top1):
        _close(
            first_decoding(table).double(),
            lenses.first_decoding(table).double(),
            "the first decoding boundaries",
        )
    share = (lenses.first_decoding(top1) < top1.shape[0] - 1).double().mean().item()
    return "top-1 at that boundary and at every one after it.", round(share, 3)


@exercise(
    "13.4",
    "where the logit lens is farthest off",
    "predict",
    1,
    10,
    predicts="the boundary at which the logit lens's mean KL to SmolLM2's output is largest",
)
def _farthest(boundary: int, *, logit_kl: Tensor):
    reference = int(logit_kl.mean(1).argmax())
    if int(boundary) != reference:
        raise Wrong(f"boundary {int(boundary)} is not where the mean over windows of logit_kl is largest")
    return "the boundary where the mean over windows of the logit lens's KL peaks.", reference
