"""Task name -> class. Adding a task: write its file, add one line here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pe_research.core.errors import ConfigError
from pe_research.tasks.base import Task
from pe_research.tasks.binary import BinaryAddition, BinaryMultiplication, ComputeSqrt
from pe_research.tasks.brackets import ModularArithmeticBrackets, SolveEquation
from pe_research.tasks.cs import BucketSort, DuplicateString, MissingDuplicateString, OddsFirst
from pe_research.tasks.dcf import ReverseString, StackManipulation
from pe_research.tasks.decimal_addition import DecimalAddition
from pe_research.tasks.language_model import LanguageModel
from pe_research.tasks.passkey import Passkey
from pe_research.tasks.regular import CycleNavigation, EvenPairs, ModularArithmetic, ParityCheck
from pe_research.tasks.scan import ScanTask
from pe_research.tasks.sequences import Copy, SelectiveCopy, Sort
from pe_research.tasks.text_dataset import TextSeq2SeqTask
from pe_research.tasks.vocabulary import Vocabulary

TASKS: dict[str, type[Task]] = {
    # regular
    "even_pairs": EvenPairs,
    "modular_arithmetic": ModularArithmetic,
    "parity_check": ParityCheck,
    "cycle_navigation": CycleNavigation,
    # deterministic context-free
    "stack_manipulation": StackManipulation,
    "reverse_string": ReverseString,
    "modular_arithmetic_brackets": ModularArithmeticBrackets,
    "solve_equation": SolveEquation,
    # context-sensitive
    "duplicate_string": DuplicateString,
    "missing_duplicate_string": MissingDuplicateString,
    "odds_first": OddsFirst,
    "binary_addition": BinaryAddition,
    "binary_multiplication": BinaryMultiplication,
    "compute_sqrt": ComputeSqrt,
    "bucket_sort": BucketSort,
    # beyond the benchmark
    "copy": Copy,
    "sort": Sort,
    "selective_copy": SelectiveCopy,
    "addition": DecimalAddition,
    "passkey": Passkey,
    # text
    "scan": ScanTask,
    "text": TextSeq2SeqTask,
    "language_model": LanguageModel,
}

BENCHMARK_TASKS = tuple(name for name, cls in TASKS.items()
                        if cls.family in ("regular", "dcf", "cs"))
GENERATED_TASKS = tuple(name for name, cls in TASKS.items() if cls.family != "text")


def task_class(name: str) -> type[Task]:
    """The class registered under ``name``; a ConfigError lists the valid names otherwise."""
    if name not in TASKS:
        raise ConfigError("task.name", name, f"choose one of {sorted(TASKS)}")
    return TASKS[name]


def default_task_config(name: str) -> dict[str, Any]:
    """A complete ``config.task`` block for task ``name`` with every default filled in."""
    return {"name": name, **task_class(name).default_config()}


def get_task(task_cfg: Mapping[str, Any], data_cfg: Mapping[str, Any] | None = None, *,
             vocabulary: Vocabulary | None = None) -> Task:
    """Build the task named by ``task_cfg['name']`` (config.task) and validate its keys.

    ``data_cfg`` (config.data) supplies ``scan_dir`` for SCAN (default 'data/scan');
    ``vocabulary`` (e.g. ``Vocabulary.load(run_dir)``) replaces a dataset task's table
    built from its training split, so an evaluated checkpoint keeps its training ids.
    """
    if "name" not in task_cfg:
        raise ConfigError("task.name", None, f"choose one of {sorted(TASKS)}")
    return task_class(task_cfg["name"]).from_config(task_cfg, data_cfg or {}, vocabulary)
