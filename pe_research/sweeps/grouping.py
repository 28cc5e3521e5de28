"""Grid points into programs: points whose members can train stacked share one job.

Two grid points go into one program when their members' configs differ only in what
``config/stacking.py`` lets members of a program differ in (its docstring names every kind), so
the program's parameter shapes are one; a program holds at most ``members_per_program`` members.
A stacked step pads every member's batch to the widest member's, so a model's points fill its
programs in the order of their widest training batch: tasks of one width train together.
``auto`` takes the cap measured for the device the jobs run on (``MEMBERS_PER_PROGRAM``, measured
by benchmarks/sweep_throughput.py); ``point`` (the default) keeps one program per grid point.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pe_research.config.stacking import program_key
from pe_research.core.errors import ConfigError
from pe_research.data.batches import train_shapes
from pe_research.sweeps.spec import Point
from pe_research.tasks import get_task

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


def widest_train_batch(config: Mapping[str, Any]) -> tuple[int, int, int]:
    """(joint, source, target) widths of the widest training batch a run's config (nested dict)
    draws: what a program stacking it pays for at nearly every step."""
    shapes = train_shapes(get_task(config["task"], config["data"]), config["data"])
    source, target, joint = (max(shape[side] for shape in shapes) for side in range(3))
    return joint, source, target


def in_width_order(points: Sequence[Point], indices: Sequence[int]) -> list[int]:
    """``indices`` ordered by their points' widest training batch (``widest_train_batch``),
    narrowest first, grid order among equals."""
    by_index = {point.index: point for point in points}
    built: dict[str, tuple[int, int, int]] = {}  # one task built per task and data setting
    widths: dict[int, tuple[int, int, int]] = {}
    for index in indices:
        config = by_index[index].members[0].config
        setting = json.dumps([config["task"], config["data"]], sort_keys=True, default=str)
        if setting not in built:
            built[setting] = widest_train_batch(config)
        widths[index] = built[setting]
    return sorted(indices, key=widths.get)


def group_points(points: Sequence[Point], indices: Sequence[int], cap: int,
                 left: Mapping[int, int] | None = None) -> list[list[int]]:
    """The grid points ``indices`` in programs: points that can stack, in the order of their
    widest training batch (``in_width_order``), up to ``cap`` members a program (a point larger
    than the cap keeps a program of its own; 0: one program per point). A program lists its
    points in grid order, and programs come in the grid order of their first point. A point
    counts the members it has ``left`` to train (default: all): a job trains only those, so
    points resumed or given more seeds fill programs by them."""
    by_index = {point.index: point for point in points}
    if cap <= 0:
        return [[index] for index in indices]
    position = {index: k for k, index in enumerate(indices)}
    groups = fill_in_order([(program_key(by_index[index].members[0].config),
                             (left or {}).get(index, len(by_index[index].members)), index)
                            for index in in_width_order(points, indices)], cap)
    groups = [sorted(group, key=position.get) for group in groups]
    return sorted(groups, key=lambda group: position[group[0]])
