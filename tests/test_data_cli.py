"""``pe-research data``: tasks, show and eval-set (``scan`` is tested in test_scan.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pe_research.cli import data as data_cli
from pe_research.core.errors import ConfigError
from pe_research.tasks import TASKS

REPO = Path(__file__).resolve().parents[1]


def run(*argv: str, overrides: tuple[str, ...] = ()) -> int:
    parser = argparse.ArgumentParser()
    data_cli.add_arguments(parser)
    args = parser.parse_args(list(argv))
    args.config_overrides = list(overrides)
    return data_cli.run(args)


def test_tasks_lists_every_task(capsys):
    assert run("tasks") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(TASKS)
    assert any(line.startswith("binary_addition") and ">= 3" in line for line in lines)


def test_show_prints_examples_in_the_task_symbols(capsys):
    assert run("show", "reverse_string", "--length", "6", "--count", "3") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "reverse_string (n = 6; vocabulary of 5 tokens)"
    for line in lines[1:]:
        source, target = line.strip().split(" -> ")
        assert len(source) == 6 and target == source[::-1]
    with pytest.raises(ConfigError, match=r"--length=2 .*>= 3"):
        run("show", "binary_multiplication", "--length", "2")


def test_show_applies_task_overrides_to_a_named_task(capsys):
    assert run("show", "selective_copy", "--length", "3", "--count", "2",
               overrides=["--config.task.blanks_per_token=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for line in lines[1:]:
        source, target = line.strip().split(" -> ")
        assert len(source) == 9 and source.count("_") == 6 and source.replace("_", "") == target
    with pytest.raises(ConfigError, match=r"task.blanks_per_token=-1(\.0)? .*>= 0"):
        run("show", "selective_copy", overrides=["--config.task.blanks_per_token=-1"])
    with pytest.raises(ConfigError, match=r"task.blank=.*keys of task"):
        run("show", "selective_copy", overrides=["--config.task.blank=1"])


def test_eval_set_freezes_the_config_grid_once(tmp_path, capsys):
    argv = ("eval-set", "--config", str(REPO / "configs" / "default.py"), "--lengths", "20",
            "30", "--out", str(tmp_path))
    overrides = ("--config.data.eval_samples=5", "--config.task.name=bucket_sort")
    assert run(*argv, overrides=overrides) == 0
    first = capsys.readouterr().out
    files = list(tmp_path.glob("eval_bucket_sort_*.parquet"))
    assert len(files) == 1 and first.startswith(f"{files[0]}: 10 examples")
    assert "n=20: 5, n=30: 5" in first
    stamp = files[0].stat().st_mtime_ns
    assert run(*argv, overrides=overrides) == 0
    assert capsys.readouterr().out == first and files[0].stat().st_mtime_ns == stamp
