"""A chapter's parameters, declared once in its parameters cell: ``name = default  # [rule] what it
is``. The runner checks what it is given against these before anything runs."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from resid.runtime import provenance

from .sources import NOTEBOOKS, ChapterError, source


@dataclass(frozen=True)
class Parameter:
    """One line of a parameters cell: ``name = default  # [rule] what it is``.

    The type is the default's; the rule, in brackets at the start of the comment, is a
    comma-separated list of ``> x``, ``< x``, ``min x``, ``max x`` (for a tuple: each element),
    ``non-empty``, ``model`` (a name ``resid.load`` knows), ``corpus``, ``one of a|b``. (No
    ``=`` in a rule: papermill's parameter parser would stumble on it.)
    """

    name: str
    default: object
    rule: str = ""

    def describe(self) -> str:
        return f"{self.name}={self.default!r}" + (f" [{self.rule}]" if self.rule else "")


def declared_parameters(name: str, notebooks: Path = NOTEBOOKS) -> dict[str, Parameter]:
    """The parameters a chapter declares, from its papermill parameters cell."""
    text = source(name, notebooks).read_text()
    cell = text.split('# %% tags=["parameters"]', 1)[1].split("\n# %%", 1)[0]
    declared = {}
    for line in cell.strip().splitlines():
        statement = ast.parse(line).body[0]
        if not (isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name)):
            raise ChapterError(f"chapter {name!r}: the parameters cell holds {line!r}, not name = value")
        rule = re.match(r".*#\s*\[([^\]]*)\]", line)
        key = statement.targets[0].id
        rule_text = rule.group(1).strip() if rule else ""
        declared[key] = Parameter(key, ast.literal_eval(statement.value), rule_text)
    return declared


def validate_parameters(name: str, given: dict, notebooks: Path = NOTEBOOKS) -> dict:
    """``given`` checked against what the chapter declares, with the values equal to their
    default dropped (so a run at the defaults has the empty dict as its parameters). A bad name,
    type or value raises ``ChapterError`` with one line that lists the valid parameters."""
    declared = declared_parameters(name, notebooks)
    listing = ", ".join(p.describe() for p in declared.values())
    checked = {}
    for key, value in given.items():
        try:
            if key not in declared:
                raise ValueError(f"unknown parameter {key!r}")
            value = _check(declared[key], value)
        except ValueError as error:
            raise ChapterError(f"chapter {name!r}: {error}. Parameters (default [rule]): {listing}") from None
        if value != declared[key].default:
            checked[key] = value
    return checked


def precision_note(name: str, parameters: dict, notebooks: Path = NOTEBOOKS) -> str | None:
    """A line for the terminal when a chapter is about to compute in bfloat16 on a CPU that has
    no bf16 matrix units, naming the faster parameter; None otherwise."""
    declared = declared_parameters(name, notebooks)
    chosen = {key: p.default for key, p in declared.items()} | parameters
    on_cpu = chosen.get("device", "cpu") == "cpu"
    if chosen.get("dtype") != "bfloat16" or not on_cpu or provenance.bf16_units() is not False:
        return None  # a torch that cannot tell gives no note
    return (
        f"chapter {name} computes in bfloat16, but this CPU has no bf16 matrix units (AMX, "
        'AVX512-BF16), so float32 runs several times faster here: P="dtype=float32"'
    )


def _check(parameter: Parameter, value: object) -> object:
    default, shown = parameter.default, f"{parameter.name}={value!r}"
    kind = type(default)
    if isinstance(default, tuple):
        if not isinstance(value, list | tuple):
            raise ValueError(f"{shown}: must be a tuple such as {default!r}")
        value = tuple(value)
        element = type(default[0]) if default else None
        if element and not all(_is_a(v, element) for v in value):
            raise ValueError(f"{shown}: every element must be {element.__name__}")
    elif not _is_a(value, kind):
        raise ValueError(f"{shown}: must be {kind.__name__}, like the default {default!r}")
    for clause in filter(None, (c.strip() for c in parameter.rule.split(","))):
        elements = value if isinstance(value, tuple) else (value,)
        if clause == "non-empty":
            ok = len(elements) > 0
        elif clause == "model":
            from resid.model.loaders import UnknownModelError
            from resid.train.loading import check_name

            try:
                check_name(value)
            except UnknownModelError as error:
                raise ValueError(f"{shown}: {str(error).split(' Embedded models')[0].rstrip('.')}") from None
            ok = True
        elif clause == "corpus":
            from resid.model.data import CORPORA

            ok = value in CORPORA or str(value).startswith("hf:")
            clause = f"one of {'|'.join(CORPORA)} or hf:<dataset>"
        elif clause.startswith("one of "):
            ok = value in clause.removeprefix("one of ").split("|")
        else:
            match = re.fullmatch(r"(min|max|>|<)\s*(\S+)", clause)
            if match is None:
                raise ChapterError(f"parameter {parameter.name}: unknown rule {clause!r}")
            op, bound = match.groups()
            bound = float(bound)
            compare = {">": float.__gt__, "min": float.__ge__, "<": float.__lt__, "max": float.__le__}[op]
            ok = all(compare(float(v), bound) for v in elements)
        if not ok:
            described = re.sub(r"^min ", "at least ", re.sub(r"^max ", "at most ", clause))
            raise ValueError(f"{shown} is out of range: must be {described}")
    return value


def _is_a(value: object, kind: type) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def parse_parameters(pairs: list[str]) -> dict:
    """``["quick=True", "model=gpt2"]`` -> ``{"quick": True, "model": "gpt2"}`` (as the training
    command line reads its overrides)."""
    from resid.train import parse_overrides

    try:
        return parse_overrides(pairs)
    except ValueError as error:
        raise ChapterError(str(error)) from None
