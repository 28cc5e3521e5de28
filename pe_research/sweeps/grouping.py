"""Grid points into programs: points whose members can train stacked share one job.

Two grid points go into one program when their members' configs differ only in what
``config/stacking.py`` lets members of a program differ in (its docstring names every kind), so
the program's parameter shapes are one; a program holds at most ``members_per_program`` members.
``auto`` takes the cap measured for the device the jobs run on (``MEMBERS_PER_PROGRAM``, measured
by benchmarks/sweep_throughput.py); ``point`` (the default) keeps one program per grid point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pe_research.config.stacking import program_key
from pe_research.core.errors import ConfigError
from pe_research.sweeps.spec import Point

# Members per program with the most model-steps per second (CPU: 2 cores; GPU: H200, the
# default config's 32 members; figures in docs/performance.md).
MEMBERS_PER_PROGRAM = {"cpu": 8, "gpu": 32, "tpu": 32}
T = TypeVar("T")
CHOICES = ("point", "auto")


def check_members_per_program(value: Any) -> int | str:
    """``point``, ``auto`` or a positive integer; ConfigError naming the option otherwise."""
    if isinstance(value, str) and value in CHOICES:
        return value
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or isinstance(value, bool):
        raise ConfigError("--members-per-program", value, "a positive number of members, "
                          "'auto' (the cap measured for the device) or 'point' (one program "
                          "per grid point)")
    return number


def members_cap(setting: int | str, executor: str, slurm: Mapping[str, Any]) -> int:
    """The cap on members per program for ``setting`` (0 for ``point``): ``auto`` is the
    measured cap of the device the jobs get: a GPU for SLURM jobs that ask for one, else this
    machine's default backend."""
    if setting == "point":
        return 0
    if setting != "auto":
        return int(setting)
    if executor == "slurm":
        device = "gpu" if slurm.get("gpus_per_job") else "cpu"
    else:
        import jax

        device = jax.default_backend()
    return MEMBERS_PER_PROGRAM.get(device, MEMBERS_PER_PROGRAM["cpu"])


def fill_in_order(entries: Sequence[tuple[str, int, T]], cap: int) -> list[list[T]]:
    """Items ``(key, size, item)`` in order into groups: an item joins the last group of its
    key while the group's sizes stay within ``cap``, else opens a new one; an item larger than
    the cap has a group of its own."""
    open_groups: dict[str, tuple[list[T], list[int]]] = {}  # the last group of each key
    groups: list[list[T]] = []
    for key, size, item in entries:
        last = open_groups.get(key)
        if last is not None and sum(last[1]) + size <= cap:
            last[0].append(item)
            last[1].append(size)
            continue
        open_groups[key] = ([item], [size])
        groups.append(open_groups[key][0])
    return groups


def group_points(points: Sequence[Point], indices: Sequence[int], cap: int,
                 left: Mapping[int, int] | None = None) -> list[list[int]]:
    """The grid points ``indices`` in programs: points that can stack, in grid order, up to
    ``cap`` members a program (a point larger than the cap keeps a program of its own; 0: one
    program per point). A point counts the members it has ``left`` to train (default: all): a
    job trains only those, so points resumed or given more seeds fill programs by them."""
    by_index = {point.index: point for point in points}
    if cap <= 0:
        return [[index] for index in indices]
    return fill_in_order([(program_key(by_index[index].members[0].config),
                           (left or {}).get(index, len(by_index[index].members)), index)
                          for index in indices], cap)
