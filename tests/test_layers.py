"""The package's shape: layers that import only downward (import-linter's contract in
pyproject.toml), no import cycle, old module names that still answer, and run records whose
keys do not depend on where a function lives."""

import ast
import hashlib
import importlib
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import resid
from resid.train import records

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "src" / "resid"
LAYERS = ("book", "tools", "train", "stats", "model", "runtime")


def lint_imports(root: Path, config: Path) -> subprocess.CompletedProcess:
    """import-linter's command on the package under ``root`` with the contract in ``config``."""
    code = "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"
    command = [sys.executable, "-c", code, "--config", str(config), "--no-cache"]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root)})


def test_the_layers_run_one_way():
    result = lint_imports(PACKAGE.parent, ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_the_contract_fails_on_a_planted_upward_import(tmp_path):
    # a copy of the real contract over a two-layer package whose lower layer imports the upper
    package = tmp_path / "resid"
    for layer in LAYERS:
        (package / layer).mkdir(parents=True)
        (package / layer / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "model" / "transformer.py").write_text("from resid.tools import heads\n")
    (package / "tools" / "heads.py").write_text("")
    config = tmp_path / "pyproject.toml"
    config.write_text((ROOT / "pyproject.toml").read_text())
    result = lint_imports(tmp_path, config)
    assert result.returncode != 0
    assert "resid.model.transformer -> resid.tools.heads" in result.stdout


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports anywhere in its code, function-level imports
    included (those under ``if TYPE_CHECKING:`` too: the package has none, and a cycle through
    one is still a cycle a reader must untangle)."""
    this = module_name(path)
    package = this if path.stem == "__init__" else this.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            # `from resid.model import hooks` imports the module resid.model.hooks
            found |= {f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return (found & modules) - {this}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py") if "_data" not in p.parts}
    return {name: imported_modules(path, set(paths)) for name, path in paths.items()}


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start, if there is one."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph[node]:
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_import_graph_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycle_through(graph, "a") == ["a", "b", "c", "a"]
    assert cycle_through(graph, "d") is None


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    assert {"resid.model.transformer", "resid.model.cache", "resid.train.training"} <= set(graph)
    assert "resid.model.cache" in graph["resid.model.transformer"]  # the graph sees real edges
    # a layer's __init__ imports its own modules, which import their siblings through it: only
    # cycles between modules count
    modules = {name: edges - {n for n in graph if n in LAYER_PACKAGES} for name, edges in graph.items()
               if name not in LAYER_PACKAGES}  # fmt: skip
    cycles = [cycle for name in sorted(modules) if (cycle := cycle_through(modules, name))]
    assert not cycles, " ; ".join(" -> ".join(c) for c in cycles)


LAYER_PACKAGES = {"resid", *(f"resid.{layer}" for layer in LAYERS)}


def test_every_old_module_name_is_the_moved_module():
    for old, new in resid.MOVED.items():
        moved = importlib.import_module(new)
        assert importlib.import_module(f"resid.{old}") is moved
        assert getattr(resid, old) is moved
    from resid.cache import Head  # as the committed chapters import it

    assert Head is importlib.import_module("resid.model.cache").Head


def chapter_names() -> list[tuple[str, str]]:
    """Every ``module.name`` a chapter source reads from the package: ``from resid.x import n`` and
    ``x.n`` for a module it imported from ``resid``."""
    used = []
    for source in sorted((ROOT / "notebooks").glob("[0-9]*.py")):
        tree = ast.parse(source.read_text())
        aliases = {"resid": "resid"}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("resid"):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if node.module == "resid" or full.removeprefix("resid.") in resid.MOVED:
                        aliases[a.asname or a.name] = full
                    else:
                        used.append((source.name, node.module, a.name))
        rebound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        rebound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.arguments) for a in n.args}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.value.id not in rebound):  # fmt: skip
                used.append((source.name, aliases[node.value.id], node.attr))
    assert len(used) > 200, len(used)  # the chapters read the package through these
    return used


def test_every_name_a_chapter_reads_resolves():
    missing = []
    for chapter, module, name in chapter_names():
        try:
            value = importlib.import_module(module)
        except ModuleNotFoundError:  # `from resid import stats` names a module; `resid.load` does not
            parent, _, leaf = module.rpartition(".")
            value = getattr(importlib.import_module(parent), leaf)
        if not hasattr(value, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{chapter}: {module}.{name}")
    assert not missing, missing


def test_a_measurement_keeps_its_name_when_its_function_moves(tmp_path, monkeypatch):
    body = "def held_out(model, windows):\n    return model(windows)\n"
    for module in ("first_home", "second_home"):
        (tmp_path / f"{module}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    first, second = (importlib.import_module(m).held_out for m in ("first_home", "second_home"))
    assert first.__module__ != second.__module__
    windows = {"windows": [1, 2]}
    assert records.measurement_id(first, windows) == records.measurement_id(second, windows)
    # and the id still sees a change to the code or to the inputs
    (tmp_path / "third_home.py").write_text(body.replace("model(windows)", "model(windows) + 1"))
    changed = importlib.import_module("third_home").held_out
    assert records.measurement_id(changed, windows) != records.measurement_id(first, windows)
    assert records.measurement_id(first, {"windows": [1, 3]}) != records.measurement_id(first, windows)


def measuring_function(name: str):
    from resid.tools import lenses, tda
    from resid.train import experiments

    return next((getattr(m, name) for m in (experiments, tda, lenses) if hasattr(m, name)), None)


def test_every_committed_measurement_is_read_by_the_package_as_it_is():
    """A moved function keeps its records: each committed measurement that a package function
    takes is filed under that function's current name and source hash, so re-executing a chapter
    reads it rather than retraining (the chapters' own functions are fingerprinted with them)."""
    recorded = {}
    for path in sorted(records.DEFAULT.glob("*.json")):
        for key in json.loads(path.read_text())["measurements"]:
            name, _, rest = key.partition("@")
            recorded.setdefault(name, set()).add(rest.split(":")[0])
    assert {"analyse", "held_out_loss", "window_loss", "kl_to_final"} <= set(recorded)
    for name, code_hashes in recorded.items():
        fn = measuring_function(name)
        if fn is None:
            continue  # a chapter's own function: its code is the chapter's, fingerprinted with it
        current = hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:12]
        assert code_hashes == {current}, (name, code_hashes, current)


def test_a_training_run_keeps_its_key_after_the_move():
    from resid.train import config_from_dict

    path = next(p for p in sorted(records.DEFAULT.glob("*.json")) if not p.name.startswith(("tda", "lens")))
    record = json.loads(path.read_text())
    assert config_from_dict(record["config"]).key() == record["key"] == path.stem


def test_the_command_lines_run_from_their_layers():
    for module in ("resid.book", "resid.train", "resid.train.experiments"):
        result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
        assert result.returncode == 0, (module, result.stderr[-1500:])
        assert "usage: python -m" in result.stdout


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_says_what_it_holds(layer):
    doc = ast.get_docstring(ast.parse((PACKAGE / layer / "__init__.py").read_text()))
    assert doc and len(textwrap.dedent(doc).split()) > 15


def test_the_status_still_finds_what_each_chapter_read_in_the_records():
    """Executions before the move recorded the measurements they read under ids with a module
    (``resid.experiments.analyse@...``); the status must still find them in the rewritten records."""
    from resid import book

    for name in ("kurtosis", "rmsnorm", "rotations", "adam", "heads", "patching", "tda"):
        rerun = json.loads((book.CHAPTERS_OUT / f"{name}.json").read_text())["rerun"]
        assert book.training_needed(rerun).endswith("training nothing"), (name, book.training_needed(rerun))
    assert records.unqualified("resid.experiments.analyse@ab12:cd34") == "analyse@ab12:cd34"
    assert records.unqualified("analyse@ab12:cd34") == "analyse@ab12:cd34"
