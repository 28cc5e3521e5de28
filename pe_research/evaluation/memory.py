"""Eval batches sized to a memory budget: an estimate from the traced program, no compile.

The estimate of a batch is the parameters, the batch and ``LIVE_COPIES`` times the largest
intermediate of the traced evaluation function (forward pass and greedy decoding, sub-programs
included): at long lengths that is the ``[B, H, T, S]`` attention logits, of which a few copies
(logits, bias, probabilities) are alive at once. It is a stated rule of thumb, not XLA's own
accounting, which needs a compile; ``benchmarks/eval_memory.py`` compares the two.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import jax

LIVE_COPIES = 4  # largest intermediates alive at once (logits, bias, probabilities, a spare)
DEFAULT_FRACTION = 0.5  # of the device's memory, when eval.memory_budget_gb is 0


def device_memory_bytes(device: jax.Device) -> int:
    """The device's memory (an accelerator's limit, the host's RAM for a CPU)."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


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


def largest_intermediate_bytes(jaxpr: jax.extend.core.Jaxpr) -> int:
    """Bytes of the largest value any equation of ``jaxpr`` (or a sub-program) produces."""
    largest = 0
    for equation in jaxpr.eqns:
        for var in equation.outvars:
            largest = max(largest, _nbytes(var.aval))
        for param in equation.params.values():
            for sub in param if isinstance(param, list | tuple) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    largest = max(largest, largest_intermediate_bytes(inner))
    return largest


def estimate_bytes(function: Callable, *args: Any) -> int:
    """Estimated peak bytes of ``function(*args)`` (arrays or ``ShapeDtypeStruct``s)."""
    closed = jax.make_jaxpr(function)(*args)
    inputs = sum(_nbytes(leaf) for leaf in jax.tree.leaves(args))
    return inputs + LIVE_COPIES * largest_intermediate_bytes(closed.jaxpr)


def rows_within_budget(batch_size: int, multiple: int, bytes_of_rows: Callable[[int], int],
                       budget: int) -> int:
    """The largest of ``batch_size, batch_size / 2, ...`` (each a multiple of ``multiple``)
    whose estimate fits ``budget``; the smallest such size when none fits."""
    rows = batch_size
    while bytes_of_rows(rows) > budget and rows % 2 == 0 and (rows // 2) % multiple == 0:
        rows //= 2
    return rows
