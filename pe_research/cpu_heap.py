"""On a CPU, a compiled program's temporaries kept in the process's heap from one call to the next.

XLA-CPU allocates all of a program's temporaries afresh at every call (0.9 GB for a train step of
the randomized-PE config). glibc serves blocks that large with new memory mappings, which the
kernel faults in and zeroes page by page and which are unmapped again when the call ends:
about 200,000 page faults per step there, a fifth of its time (benchmarks/RESULTS.md, "CPU
heap"). With ``PE_RESEARCH_CPU_HEAP=1``, two settings keep those blocks in the heap, where the
next call finds them:

* ``before_backends``: CPU programs run on the thread that calls them (JAX's
  ``jax_cpu_enable_async_dispatch`` off). A program dispatched asynchronously runs on a worker
  thread, whose memory comes from an arena of its own that glibc maps and trims as it likes.
  Read when JAX creates its CPU client, so it must come first; it changes nothing on GPUs/TPUs.
* ``keep_freed_memory``: glibc serves large blocks from the heap instead of mapping them
  (``M_MMAP_MAX`` 0) and never returns freed heap to the system (``M_TRIM_THRESHOLD``), so the
  process keeps the memory of its largest program, as PyTorch's caching allocator does. Applied
  only once the devices are known to be CPUs (``mesh.data_mesh``); an accelerator's host is
  left as it is. It must come after JAX's CPU client has started: made at start-up instead,
  the test's 51 MB program faulted in 5,069 pages per call, not 45 (tests/test_cpu_heap.py).

Off by default: with dispatch on the calling thread, a step's dispatch no longer overlaps the
step before it, which costs small steps run one per call more than the faults they save (a CPU
sweep config of two training shapes, batch 32: 15 % fewer steps/s with 4 ms of dispatch per
call, still a few percent since the state crosses calls as flat leaves, ``leaf_state``). Steps
whose temporaries are far above 32 MB gain: the randomized-PE config's 40 steps take 72-73 s
instead of 83-90. A C library other than glibc leaves both as they are, and
``JAX_CPU_ENABLE_ASYNC_DISPATCH`` set by the user is obeyed.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Sequence

import jax

SWITCH_ENV = "PE_RESEARCH_CPU_HEAP"
ON, OFF = ("1", "on", "true", "yes"), ("", "0", "off", "false", "no")
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's malloc.h
NEVER_TRIM = -1  # mallopt takes an int; glibc reads it as a size_t, so -1 is the largest size


def switched_on() -> bool:
    """Whether ``PE_RESEARCH_CPU_HEAP`` asks for these settings (off by default)."""
    return os.environ.get(SWITCH_ENV, "").strip().lower() in ON


def before_backends() -> None:
    """CPU programs run on the calling thread when asked for; call before JAX's first
    computation. A value of the switch that means neither on nor off is said in one line."""
    setting = os.environ.get(SWITCH_ENV, "").strip()
    if setting.lower() not in ON + OFF:
        print(f"{SWITCH_ENV}={setting} means neither on nor off; left off (set it to 1 or 0)",
              file=sys.stderr)
    if switched_on() and "JAX_CPU_ENABLE_ASYNC_DISPATCH" not in os.environ:
        jax.config.update("jax_cpu_enable_async_dispatch", False)


class _Heap:
    """glibc's settings, applied at most once per process."""

    def __init__(self) -> None:
        self.kept = False

    def keep(self) -> bool:
        if self.kept:
            return True
        if not switched_on() or platform.libc_ver()[0] != "glibc":
            return False
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            return False
        self.kept = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
        return self.kept


_HEAP = _Heap()


def keep_freed_memory(devices: Sequence[jax.Device]) -> bool:
    """When ``devices`` are CPUs, glibc keeps freed blocks for the next call; whether it does."""
    return bool(devices) and devices[0].platform == "cpu" and _HEAP.keep()
