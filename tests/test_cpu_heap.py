"""CPU programs' temporaries kept in the heap (cpu_heap.py, ``PE_RESEARCH_CPU_HEAP=1``): the
settings, what leaves them off, and their effect: a program with 51 MB of temporaries faults its
pages in once, not at every call."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
from conftest import REPO, subprocess_env

from pe_research import cpu_heap

# 51,380,224 bytes of temporaries (the [3072, 4096] product feeding the second one), more than
# glibc's largest dynamic mmap threshold (32 MiB), so without the settings each call maps them.
PROBE = """
import resource, jax, jax.numpy as jnp
from pe_research import cpu_heap
cpu_heap.before_backends()
from pe_research.mesh import data_mesh
data_mesh()
a, b = jnp.ones((3072, 256)), jnp.ones((256, 4096))
program = jax.jit(lambda a, b: jnp.tanh(a @ b) @ b[:64].T)
for _ in range(6):
    program(a, b).block_until_ready()
faults = []
for _ in range(9):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    program(a, b).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(jax.config.values["jax_cpu_enable_async_dispatch"])
print(sorted(faults)[len(faults) // 2], ",".join(map(str, faults)))
print(program.lower(a, b).compile().memory_analysis().temp_size_in_bytes)
"""


def probe(**env: str) -> tuple[bool, float, int, str]:
    """(async dispatch on, the median of 9 calls' minor page faults after 6 warm-up calls,
    temporary bytes, every call's faults) in a fresh process. On a loaded machine the first few
    calls, and now and then a later one, fault the temporaries in again with the settings made
    (4 calls in a row after 2 warm-ups, once), hence the warm-up and the median."""
    base = subprocess_env()
    for name in (cpu_heap.SWITCH_ENV, "JAX_CPU_ENABLE_ASYNC_DISPATCH"):
        base.pop(name, None)
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            env={**base, **env}, cwd=REPO, timeout=120, check=True)
    dispatch, faults, each, temporaries = result.stdout.split()
    return dispatch == "True", float(faults), int(temporaries), each


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc")
def test_a_programs_temporaries_are_faulted_in_once_not_at_every_call():
    asynchronous, faults, temporaries, each = probe(**{cpu_heap.SWITCH_ENV: "1"})
    pages = temporaries / 4096
    assert temporaries > 32 * 2**20
    assert not asynchronous
    assert faults < pages / 20, each  # 45 of 12,544 pages measured
    asynchronous, faults, _, each = probe()  # the default: as JAX and glibc have it
    assert asynchronous
    assert faults > pages / 2, each  # every page, every call (12,968 measured)


@pytest.mark.parametrize("env", [{cpu_heap.SWITCH_ENV: "0"}, {cpu_heap.SWITCH_ENV: "off"},
                                 {cpu_heap.SWITCH_ENV: "1", "JAX_CPU_ENABLE_ASYNC_DISPATCH": "1"}])
def test_off_and_jaxs_own_variable_keep_asynchronous_dispatch(env):
    asynchronous, *_ = probe(**env)
    assert asynchronous


def test_only_cpus_asked_for_change_glibc(monkeypatch):
    heap = cpu_heap._Heap()
    monkeypatch.setattr(cpu_heap, "_HEAP", heap)
    cpu = types.SimpleNamespace(platform="cpu")
    monkeypatch.delenv(cpu_heap.SWITCH_ENV, raising=False)
    assert not cpu_heap.keep_freed_memory([cpu])  # not asked for
    monkeypatch.setenv(cpu_heap.SWITCH_ENV, "1")
    assert not cpu_heap.keep_freed_memory([types.SimpleNamespace(platform="gpu")])
    assert not cpu_heap.keep_freed_memory([])
    assert not heap.kept


def test_a_value_neither_on_nor_off_is_one_line_and_leaves_it_off(monkeypatch, capsys):
    monkeypatch.setenv(cpu_heap.SWITCH_ENV, "maybe")
    monkeypatch.delenv("JAX_CPU_ENABLE_ASYNC_DISPATCH", raising=False)
    cpu_heap.before_backends()
    assert capsys.readouterr().err == (f"{cpu_heap.SWITCH_ENV}=maybe means neither on nor off; "
                                       "left off (set it to 1 or 0)\n")
    assert not cpu_heap.switched_on()
