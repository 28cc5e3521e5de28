"""`make test-fast` leaves out what trains: every fixture that trains a run is known to the
marker hook, and a test that uses one is marked ``slow``; the modules the suite runs first
exist."""

from __future__ import annotations

import ast

import pytest
from conftest import LONG_FIRST, REPO, TRAINING_FIXTURES

TRAINS = ("train(", "run_train(", "train_here(", "train_ensemble(", "main([")


def fixtures_that_train() -> set[str]:
    found = set()
    for path in sorted((REPO / "tests").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (isinstance(node, ast.FunctionDef)
                    and any("fixture" in ast.unparse(d) for d in node.decorator_list)
                    and any(call in ast.unparse(node) for call in TRAINS)):
                found.add(node.name)
    return found


def test_every_fixture_that_trains_is_known():
    assert fixtures_that_train() == TRAINING_FIXTURES


def test_a_test_of_a_trained_run_is_slow(request, trained_run_dir):
    assert request.node.get_closest_marker("slow") is not None


def test_a_unit_test_is_not(request):
    assert request.node.get_closest_marker("slow") is None
    assert pytest.mark.battery.name == "battery"


def test_the_modules_run_first_exist():
    assert [name for name in LONG_FIRST if not (REPO / "tests" / f"{name}.py").is_file()] == []
