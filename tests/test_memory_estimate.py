"""The eval memory estimate (evaluation/memory.py): program-order liveness, golden values; the
host memory a CPU budget is a fraction of, cgroup limits included (core/device_memory.py)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import pytest

from pe_research.core import device_memory
from pe_research.evaluation import memory

X = jax.ShapeDtypeStruct((1000,), jnp.float32)  # 4,000 bytes


def peak(function, *args) -> int:
    return memory.peak_live_bytes(jax.make_jaxpr(function)(*args).jaxpr)


def test_a_value_is_freed_after_its_last_use():
    # x * 2 (4,000 bytes) is alive while + 1 writes its 4,000 bytes; then only the sum's 4
    assert peak(lambda x: jnp.sum(x * 2 + 1), X) == 8_000
    # kept to the end: three outputs of 4,000 bytes each, the last written beside the other two
    assert peak(lambda x: (x * 2, x * 3, x * 4), X) == 12_000


def test_a_sub_program_adds_its_own_peak_while_it_runs():
    inner = jax.jit(lambda x: jnp.sum(x * 2 + 1))
    assert peak(lambda x: inner(x) * 3, X) == 8_000 + 4  # the nested peak + its 4-byte output
    held = jax.jit(lambda x: jnp.sum(x * 2 + 1))
    assert peak(lambda x: (x * 5, held(x)), X) == 4_000 + 8_000 + 4  # x * 5 stays alive


def test_a_loop_counts_its_body_and_its_stacked_outputs():
    def body(carry, row):
        return carry + jnp.sum(row * 2 + 1), row * 3  # peak 16 bytes: row * 2 and its + 1
    rows = jax.ShapeDtypeStruct((10, 2), jnp.float32)  # 10 steps of 2 numbers
    # the body's 16 bytes beside the loop's outputs: 80 stacked bytes and the 4-byte carry
    assert peak(lambda r: jax.lax.scan(body, jnp.float32(0), r), rows) == 84 + 16


def test_the_estimate_is_the_inputs_plus_the_margin_times_the_peak():
    assert memory.estimate_bytes(lambda x: jnp.sum(x * 2 + 1), X) == \
        4_000 + int(memory.MARGIN * 8_000)


@pytest.mark.parametrize(("rows", "expected"), [(0, 64), (2**20, 8), (2**19, 4)])
def test_rows_are_halved_until_the_estimate_fits(rows, expected):
    """64 rows of 2**14 bytes each (1 MiB): a budget of ``rows`` bytes plus 0 fixed ones."""
    budget = rows or 2**30
    assert memory.rows_within_budget(64, 4, lambda n: n * 2**14 * 8, budget) == expected


GIB = 2**30
RAM = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def host_with(tmp_path, cgroup: str, limits: dict[str, str]):
    """A fake root: ``/proc/self/cgroup`` reading ``cgroup``, and files under ``/sys/fs/cgroup``."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for relative, text in limits.items():
        path = tmp_path / "sys/fs/cgroup" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return tmp_path


@pytest.mark.parametrize(("cgroup", "limits", "expected"), [
    # cgroup v2: the job's own limit; a parent's "max" is no limit
    ("0::/system.slice/job_42\n", {"system.slice/job_42/memory.max": str(GIB),
                                    "system.slice/memory.max": "max"}, GIB),
    # v2: the job unlimited, a parent (a SLURM user slice) limited
    ("0::/slurm/uid_1/job_7\n", {"slurm/uid_1/job_7/memory.max": "max",
                                  "slurm/uid_1/memory.max": str(2 * GIB)}, 2 * GIB),
    # v1 beside other controllers; its "unlimited" (a number above any RAM) at the root
    ("4:memory:/slurm/job_7\n3:cpuset:/\n", {
        "memory/slurm/job_7/memory.limit_in_bytes": str(3 * GIB),
        "memory/memory.limit_in_bytes": "9223372036854771712"}, 3 * GIB),
    # v1 in a container: the path of /proc/self/cgroup is not mounted, the mount's root is
    ("4:memory:/process_api/abc\n", {"memory/memory.limit_in_bytes": str(5 * GIB)}, 5 * GIB),
    ("0::/\n", {"memory.max": "max"}, RAM),  # no limit anywhere
    ("", {}, RAM),
])
def test_a_cgroup_limit_below_the_ram_is_the_host_memory(tmp_path, cgroup, limits, expected):
    root = host_with(tmp_path, cgroup, limits)
    assert device_memory.host_memory_bytes(root) == min(expected, RAM)


def test_without_proc_the_host_memory_is_the_ram(tmp_path):
    assert device_memory.host_memory_bytes(tmp_path) == RAM


def test_a_cpu_budget_is_a_fraction_of_the_host_memory():
    cpu = jax.devices("cpu")[0]
    assert memory.budget_bytes(0, cpu) == int(memory.DEFAULT_FRACTION
                                              * device_memory.host_memory_bytes())
    assert memory.budget_bytes(1.5, cpu) == int(1.5 * GIB)


@pytest.mark.parametrize("sharing", ["", "1", "4"])
def test_the_workers_of_a_local_sweep_split_the_host_memory(tmp_path, monkeypatch, sharing):
    monkeypatch.setenv(device_memory.SHARING_ENV, sharing)
    root = host_with(tmp_path, "4:memory:/job\n",
                     {"memory/job/memory.limit_in_bytes": str(8 * GIB)})
    assert device_memory.host_memory_bytes(root) == min(8 * GIB, RAM) // int(sharing or 1)


def test_a_local_sweep_tells_its_workers_how_many_share_the_host():
    from pe_research.sweeps.executors import WORKER_ENV, worker_env

    env = worker_env(3)
    assert env[device_memory.SHARING_ENV] == "3"
    assert all(env[key] == value for key, value in WORKER_ENV.items())
