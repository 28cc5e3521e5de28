"""Whether a stacked program fits its device: its compiled train step's memory against a budget.

The step is compiled ahead of time at the widest training batch any member can draw, before
anything trains; JAX keeps that trace and executable for the step's first call at that shape, so
a run that draws it compiles nothing twice. A program that does not fit raises
``ProgramMemoryError`` with how many of its members would: parameters, Adam's moments, batches
and activations all grow with the members, so each takes about the program's memory over their
count. A sweep's job then trains its members as programs of that size (``sweeps/worker.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding

from pe_research import data
from pe_research.core.device_memory import device_memory_bytes
from pe_research.core.errors import UsageError
from pe_research.training.step import CompiledStep

TRAIN_FRACTION = 0.9  # of the device's memory, when train.memory_budget_gb is 0
GIB = 2**30


class ProgramMemoryError(UsageError):
    """The members of one program need more memory than the budget; about ``fit`` of them fit."""

    def __init__(self, members: int, needed: int, budget: int):
        self.members, self.needed, self.budget = members, needed, budget
        self.fit = max(1, min(members - 1, int(budget // (needed / members))))
        super().__init__(
            f"{members} members in one program need {gb(needed)} GB (their compiled train "
            f"step), above the {gb(budget)} GB budget (train.memory_budget_gb; 0: "
            f"{TRAIN_FRACTION:.0%} of the device's memory); about {self.fit} fit: train fewer "
            f"members together, or raise train.memory_budget_gb")


def gb(size: int) -> str:
    """Bytes as GiB, three significant digits."""
    return f"{size / GIB:.3g}"


def budget_bytes(memory_budget_gb: float, device: jax.Device | None = None) -> int:
    """``train.memory_budget_gb`` in bytes; 0 means ``TRAIN_FRACTION`` of the device's memory."""
    if memory_budget_gb > 0:
        return int(memory_budget_gb * GIB)
    return int(TRAIN_FRACTION * device_memory_bytes(device or jax.devices()[0]))


def compiled_bytes(compiled: Any) -> int | None:
    """Arguments + outputs + temporaries - donated buffers of a compiled program; None where
    the backend does not say."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return (analysis.argument_size_in_bytes + analysis.output_size_in_bytes
            + analysis.temp_size_in_bytes - analysis.alias_size_in_bytes)


def widest_batches(tasks: Sequence[Any], configs: Sequence[Any], per_call: int,
                   sharding: NamedSharding) -> list[dict[str, jax.Array]]:
    """``per_call`` copies of the members' stacked training batch ``[M, B, ...]`` padded to the
    widest source, target and joint widths any member's training lengths pad to."""
    shapes = set().union(*(data.train_shapes(task, config.data.to_dict())
                           for task, config in zip(tasks, configs, strict=True)))
    widest = [max(shape[side] for shape in shapes) for side in range(3)]
    local = [data.pad_to(data.train_batch(task, config.data, config.seed, 0), *widest)
             for task, config in zip(tasks, configs, strict=True)]
    batch = jax.device_put(data.stack_batches(local), sharding)
    return [batch] * per_call


def check_program_memory(step: CompiledStep, batches: Sequence[dict[str, Any]], budget: int,
                         members: int) -> int | None:
    """The compiled bytes of the ensemble ``step`` of ``members`` on ``batches`` (its state
    held); raises ``ProgramMemoryError`` above ``budget``."""
    needed = compiled_bytes(step.lower(batches).compile())
    if needed is not None and needed > budget:
        raise ProgramMemoryError(members, needed, budget)
    return needed
