"""Sweep files: a base config, a grid of overrides, and the member axis trained stacked.

A sweep file (``configs/sweeps/*.py``) defines ``get_config()`` (the base, as any config file)
and ``sweep()``, which returns a ``Sweep`` (or a plain list of override dicts)::

    def sweep():
        return Sweep(grid=product({"model.pe.type": ["rope", "alibi"],
                                   "task.name": ["copy", "reverse_string"]}),
                     seeds=(0, 1, 2))

Each grid point's members (``seeds`` x ``learning_rates``) train together as one ensemble
(``training/ensemble.py``), and each member is an ordinary run directory
``SWEEP_DIR/<point name>/<member name>/``. Every member's config is validated here, before any
run starts.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_collections

from pe_research.config import (
    apply_overrides,
    call_user_code,
    from_mapping,
    load_config,
    load_user_module,
    override_text,
    to_dict,
    validate_config,
)
from pe_research.config.naming import short_keys, value_name
from pe_research.core.arguments import split_override
from pe_research.core.errors import ConfigError

STACKED_KEYS = ("seed", "train.learning_rate")  # the member axis, never a grid key
SLURM_KEYS = ("partition", "gpus_per_job", "cpus_per_job", "time_min", "mem_gb", "sbatch",
              "max_requeues")


@dataclasses.dataclass(frozen=True)
class Sweep:
    """What ``sweep()`` returns: the grid, the stacked member axis, SLURM defaults.

    ``grid``: one dict of dotted config overrides per grid point. ``seeds`` (and, when given,
    ``learning_rates``: members are then seeds x rates) are trained stacked in one program.
    ``slurm``: defaults for ``--executor slurm`` (keys of ``SLURM_KEYS``).
    ``members_per_program``: ``point`` (one program per grid point), ``auto`` (grid points that
    stack share programs up to the cap measured for the device) or a cap (``grouping.py``);
    ``--members-per-program`` overrides it.
    """

    grid: Sequence[Mapping[str, Any]] = ({},)
    seeds: Sequence[int] = (0,)
    learning_rates: Sequence[float] = ()
    slurm: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    members_per_program: int | str = "point"


def product(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of ``{key: values}``, the first key varying slowest."""
    keys = list(axes)
    return [dict(zip(keys, values, strict=True))
            for values in itertools.product(*(axes[key] for key in keys))]


@dataclasses.dataclass(frozen=True)
class Member:
    """One run of a grid point: its directory (relative to the sweep) and full config."""

    name: str
    seed: int
    learning_rate: float | None
    config: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Point:
    """One grid point: a readable name, its overrides, and its members (one ensemble)."""

    index: int
    name: str
    overrides: dict[str, Any]
    members: list[Member]

    def run_dirs(self, sweep_dir: Path) -> list[Path]:
        return [sweep_dir / self.name / member.name for member in self.members]


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: every point with every member's config."""

    file: Path
    points: list[Point]
    swept_keys: list[str]
    seeds: list[int]
    learning_rates: list[float]
    slurm: dict[str, Any]
    members_per_program: int | str = "point"

    @property
    def runs(self) -> int:
        return sum(len(point.members) for point in self.points)


def point_name(overrides: Mapping[str, Any], labels: Mapping[str, str]) -> str:
    """``pe.type=rope,task.name=copy``; ``base`` for a point without overrides."""
    parts = [f"{labels[key]}={value_name(value)}" for key, value in overrides.items()]
    return ",".join(parts) or "base"


def varying_keys(grid: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> set[str]:
    """The keys that tell grid points apart: those whose value (or presence) differs between
    points; every key of a one-point grid."""
    if len(grid) == 1:
        return set(keys)
    missing = object()
    return {key for key in keys
            if len({repr(point.get(key, missing)) for point in grid}) > 1}


def member_name(seed: int, learning_rate: float | None) -> str:
    return f"seed_{seed}" if learning_rate is None else f"seed_{seed}_lr_{learning_rate:g}"


def _as_sweep(value: Any, path: Path, base_seed: int) -> Sweep:
    if isinstance(value, Sweep):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, Mapping) for v in value):
        return Sweep(grid=list(value), seeds=(base_seed,))
    raise ConfigError("--sweep", str(path), "sweep() must return a Sweep(...) or a list of "
                      f"override dicts, not {type(value).__name__}")


def load_sweep(path: str | Path, overrides: Sequence[str] = ()) -> SweepPlan:
    """Read a sweep file and validate every member of every grid point.

    ``overrides`` (``--config.KEY=VALUE``) change the base config of every point.
    """
    path = Path(path).absolute()
    if not path.is_file():
        raise ConfigError("SWEEP_FILE", str(path), "no such sweep file (see configs/sweeps/)")
    base = load_config(path, overrides, validate=False)
    module = load_user_module(path)
    if not hasattr(module, "sweep"):
        raise ConfigError("SWEEP_FILE", str(path), "the file must define sweep() next to "
                          "get_config()")
    spec = _as_sweep(call_user_code(path, module.sweep), path, int(base.seed))
    seeds = _check_members(spec)
    grid = [dict(point) for point in spec.grid] or [{}]
    keys = list(dict.fromkeys(key for point in grid for key in point))
    for key in keys:
        if key in STACKED_KEYS:
            raise ConfigError(key, None, "is the stacked member axis, not a grid key; use "
                              "Sweep(seeds=..., learning_rates=...)")
    check_overrides_outside_grid(overrides, grid, path)
    labels = short_keys(keys)
    named = varying_keys(grid, keys)
    unknown = set(spec.slurm) - set(SLURM_KEYS)
    if unknown:
        raise ConfigError("Sweep.slurm", sorted(unknown), f"keys are {SLURM_KEYS}")
    points, names = [], set()
    for index, overrides_i in enumerate(grid):
        name = point_name({k: v for k, v in overrides_i.items() if k in named}, labels)
        if name in names:
            name = f"{name}_{index}"
        names.add(name)
        points.append(Point(index, name, overrides_i,
                            _members(base, overrides_i, index, name, seeds,
                                     list(spec.learning_rates))))
    return SweepPlan(file=path, points=points, swept_keys=keys, seeds=seeds,
                     learning_rates=[float(r) for r in spec.learning_rates],
                     slurm=dict(spec.slurm), members_per_program=spec.members_per_program)


def check_overrides_outside_grid(overrides: Sequence[str], grid: Sequence[Mapping[str, Any]],
                                 path: Path) -> None:
    """ConfigError for a ``--config`` override of a key that grid points set: the point's value
    wins there, so the override would be silently ignored."""
    for text in overrides:
        key, value = split_override(text)
        covered = sum(key in point for point in grid)
        if covered:
            raise ConfigError(f"--config.{key}", value, f"{covered} of the {len(grid)} grid "
                              f"points set it, and a grid point's value wins; change the grid "
                              f"in {path.name}")


def _check_members(spec: Sweep) -> list[int]:
    seeds = [int(seed) for seed in spec.seeds]
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError("Sweep.seeds", tuple(spec.seeds), "distinct non-negative integers")
    rates = list(spec.learning_rates)
    if len(set(rates)) != len(rates) or any(not isinstance(r, int | float) or r <= 0
                                             for r in rates):
        raise ConfigError("Sweep.learning_rates", tuple(rates), "distinct positive numbers")
    return seeds


def _members(base: ml_collections.ConfigDict, overrides: Mapping[str, Any], index: int,
             name: str, seeds: Sequence[int], rates: Sequence[float]) -> list[Member]:
    """Every member's validated config; a ConfigError names the grid point and the key."""
    try:
        config = apply_overrides(from_mapping(to_dict(base)),
                                 [f"{key}={override_text(value)}"
                                  for key, value in overrides.items()])
        members = []
        for seed in seeds:
            for rate in rates or [None]:
                member = from_mapping(to_dict(config))
                member.seed = seed
                if rate is not None:
                    member.train.learning_rate = float(rate)
                validate_config(member)
                members.append(Member(member_name(seed, rate), seed, rate, to_dict(member)))
        return members
    except ConfigError as error:
        raise ConfigError(error.key, error.value,
                          f"{error.valid} (grid point {index}: {name})") from None
