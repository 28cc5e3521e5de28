"""The package's shape: no import cycle, and the lower layers import nothing from the upper ones."""

from __future__ import annotations

import ast
from pathlib import Path

import pe_research

PACKAGE = Path(pe_research.__file__).parent
LOWER = ("model", "positional", "tasks")
UPPER = ("training", "evaluation", "runs", "sweeps", "cli")


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


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_lower_layers_import_no_upper_layer():
    upward = sorted((name, target) for name, targets in import_graph().items()
                    if layer(name) in LOWER for target in targets if layer(target) in UPPER)
    assert upward == []


def test_one_file_per_concern_to_extend():
    """Where a contributor adds a scheme, a task, a metric and a subcommand."""
    for path in ("positional/registry.py", "tasks/registry.py", "evaluation/metrics.py",
                 "cli/app.py", "runs/run_dir.py", "runs/restore.py"):
        assert (PACKAGE / path).is_file(), path
    assert len(list(PACKAGE.glob("*.py"))) <= 8
