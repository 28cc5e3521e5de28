"""The package's shape: no import cycle between modules, and every package imports only packages
below it in one total order (``LAYERS``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pe_research

PACKAGE = Path(pe_research.__file__).parent
# Bottom to top: a module may import its own package and the packages before it, never one
# after it. Top-level modules (``runtime.py``) are layers of their own.
LAYERS = ("core", "runtime", "positional", "tasks", "model", "data", "config", "runs",
          "evaluation", "training", "sweeps", "analysis", "cli")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports: ``from a import b`` is module ``a.b`` when there is
    one (a submodule of package ``a``), else module ``a``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                     else node.module for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: imported_modules(path, modules) - {name} for name, path in paths.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "pe_research.runs.restore" in graph
    assert "pe_research.config.schema" in graph["pe_research.config.validate"]
    assert "pe_research.runs.restore" in graph["pe_research.evaluation.range_eval"]
    assert "pe_research.runtime" in graph["pe_research.data.placement"]


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of a module from a package above its own in ``LAYERS``."""
    rank = {name: index for index, name in enumerate(LAYERS)}
    return sorted((name, target) for name, targets in graph.items() if layer(name)
                  for target in targets if layer(target)
                  and rank[layer(target)] > rank[layer(name)])


def test_every_package_has_its_place_in_the_order():
    assert {layer(name) for name in import_graph()} - {""} == set(LAYERS)


def test_no_package_imports_one_above_it():
    assert upward_imports(import_graph()) == []


def test_an_upward_import_is_seen():
    graph = {"pe_research.model.x": {"pe_research.training.y"}, "pe_research.training.y": set()}
    assert upward_imports(graph) == [("pe_research.model.x", "pe_research.training.y")]


def test_one_file_per_concern_to_extend():
    """Where a contributor adds a scheme, a task, a metric and a subcommand."""
    for path in ("positional/registry.py", "tasks/registry.py", "model/metrics.py",
                 "cli/app.py", "runs/run_dir.py", "runs/restore.py"):
        assert (PACKAGE / path).is_file(), path
    assert sorted(path.name for path in PACKAGE.glob("*.py")) == ["__init__.py", "runtime.py"]
