"""Eval batches sized to a memory budget: an estimate from the traced program, no compile.

The estimate of a batch is its inputs and the peak of the traced evaluation function's live
values (forward pass and greedy decoding, sub-programs included), its equations run in program
order, each value freed after its last use, times ``MARGIN``: XLA's buffers came to 0.74-1.27x
that peak for the benchmark configs' evaluation with attention in query blocks (the default;
``benchmarks/eval_memory.py`` compares the two). XLA's own accounting needs a compile.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
from jax.extend.core import Jaxpr, JaxprEqn, Literal

from pe_research.core.device_memory import device_memory_bytes

MARGIN = 1.3  # XLA's buffers over the program-order peak: up to 1.27x measured
DEFAULT_FRACTION = 0.5  # of the device's memory, when eval.memory_budget_gb is 0


def budget_bytes(memory_budget_gb: float, device: jax.Device | None = None) -> int:
    """``eval.memory_budget_gb`` in bytes; 0 means ``DEFAULT_FRACTION`` of the device's memory."""
    if memory_budget_gb > 0:
        return int(memory_budget_gb * 2**30)
    return int(DEFAULT_FRACTION * device_memory_bytes(device or jax.devices()[0]))


def _nbytes(aval: Any) -> int:
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None or not hasattr(dtype, "itemsize"):
        return 0  # tokens, keys and other non-arrays
    return math.prod(shape) * dtype.itemsize


def _sub_programs(equation: JaxprEqn) -> list[Jaxpr]:
    """The jaxprs an equation runs (a loop's body and condition, a nested jit, ...)."""
    programs = []
    for param in equation.params.values():
        for sub in param if isinstance(param, list | tuple) else [param]:
            inner = getattr(sub, "jaxpr", sub)
            if hasattr(inner, "eqns"):
                programs.append(inner)
    return programs


def peak_live_bytes(jaxpr: Jaxpr) -> int:
    """Peak bytes of the values ``jaxpr`` computes, its equations run in order and each value
    freed after its last use; while an equation runs, its sub-programs' own peak is added.
    The inputs are not counted (their holder counts them)."""
    last_use: dict[Any, int] = {}
    for index, equation in enumerate(jaxpr.eqns):
        for var in equation.invars:
            if not isinstance(var, Literal):
                last_use[var] = index
    for var in jaxpr.outvars:
        if not isinstance(var, Literal):
            last_use[var] = len(jaxpr.eqns)
    freed_after: dict[int, list[Any]] = {}
    for var, index in last_use.items():
        freed_after.setdefault(index, []).append(var)
    live_bytes: dict[Any, int] = {}
    live = peak = 0
    for index, equation in enumerate(jaxpr.eqns):
        inner = max((peak_live_bytes(sub) for sub in _sub_programs(equation)), default=0)
        outputs = {var: _nbytes(var.aval) for var in equation.outvars}
        peak = max(peak, live + inner + sum(outputs.values()))
        for var, size in outputs.items():
            if var in last_use:
                live_bytes[var] = size
                live += size
        for var in freed_after.get(index, []):
            live -= live_bytes.pop(var, 0)
    return peak


def estimate_bytes(function: Callable, *args: Any) -> int:
    """Estimated peak bytes of ``function(*args)`` (arrays or ``ShapeDtypeStruct``s)."""
    closed = jax.make_jaxpr(function)(*args)
    inputs = sum(_nbytes(leaf) for leaf in jax.tree.leaves((args, closed.consts)))
    return inputs + int(MARGIN * peak_live_bytes(closed.jaxpr))


def rows_within_budget(batch_size: int, multiple: int, bytes_of_rows: Callable[[int], int],
                       budget: int) -> int:
    """The largest of ``batch_size, batch_size / 2, ...`` (each a multiple of ``multiple``)
    whose estimate fits ``budget``; the smallest such size when none fits."""
    rows = batch_size
    while bytes_of_rows(rows) > budget and rows % 2 == 0 and (rows // 2) % multiple == 0:
        rows //= 2
    return rows
