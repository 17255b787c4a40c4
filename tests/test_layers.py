"""The package's shape: no module imports, even inside a function, a module that imports it back."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "src" / "resid"


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports anywhere in its code (function-level imports
    included; imports only under ``if TYPE_CHECKING:`` are annotations, never run, and left out)."""
    tree = ast.parse(path.read_text())
    annotation_only = {
        id(node)
        for branch in ast.walk(tree)
        if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
        for statement in branch.body
        for node in ast.walk(statement)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in annotation_only:
            continue
        if isinstance(node, ast.ImportFrom):
            relative = node.level == 1 or (node.module or "").split(".")[0] == "resid"
            if not relative:
                continue
            parts = (node.module or "").split(".")
            parts = parts[1:] if parts[0] == "resid" else parts
            found |= {parts[0]} if parts and parts[0] else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("resid.")}
    return (found & modules) - {path.stem}


def import_graph() -> dict[str, set[str]]:
    paths = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
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
    assert {"model", "cache", "train", "loaders", "book"} <= set(graph)
    cycles = [cycle for name in sorted(graph) if (cycle := cycle_through(graph, name))]
    assert not cycles, " ; ".join(" -> ".join(c) for c in cycles)


def test_the_layers_run_one_way():
    graph = import_graph()
    model_layer = {"model", "cache", "basis", "hooks", "interval", "stats", "metrics"}
    for name in model_layer:
        assert not graph[name] - model_layer, (name, graph[name] - model_layer)
    book_layer = {"book", "course", "exercises", "claims", "sources", "parameters", "presentation",
                  "freshness", "handouts", "pages"}  # fmt: skip
    for name, imported in graph.items():
        if name not in book_layer:
            assert not imported & book_layer, (name, imported)
    # book.py runs chapters and reads the command line; its other jobs are modules of their own
    assert {"parameters", "presentation", "freshness", "handouts", "pages"} <= graph["book"]
