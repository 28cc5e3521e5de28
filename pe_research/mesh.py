"""Devices, the ``data`` mesh, and multi-host start-up."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pe_research import cpu_heap
from pe_research.errors import ConfigError, check_divisible

DATA_AXIS = "data"
MEMBERS_AXIS = "members"  # ensembles: one slice of members per group of devices
DISTRIBUTED_ENV = "PE_RESEARCH_DISTRIBUTED"


def maybe_initialize_distributed(enabled: bool) -> None:
    """``jax.distributed.initialize()`` (cluster auto-detection) when asked for, once.

    Asked for by ``config.distributed`` or ``PE_RESEARCH_DISTRIBUTED=1``. The coordinator address,
    process count and id come from the cluster (TPU pod, SLURM, Open MPI) or from
    ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``.
    """
    wanted = enabled or os.environ.get(DISTRIBUTED_ENV, "") not in ("", "0", "false")
    if not wanted or jax.distributed.is_initialized():
        return
    try:
        jax.distributed.initialize(
            coordinator_address=os.environ.get("JAX_COORDINATOR_ADDRESS"),
            num_processes=_env_int("JAX_NUM_PROCESSES"),
            process_id=_env_int("JAX_PROCESS_ID"),
        )
    except (ValueError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            "distributed", True,
            f"jax.distributed could not start ({reason}); launch under SLURM, Open MPI or on a "
            "TPU pod, or set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID; on "
            "one host use --config.distributed=false") from None


def sync_processes(name: str) -> None:
    """Barrier across processes (a no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if value and not value.isdigit():
        raise ConfigError(name, value, "a non-negative integer (an environment variable)")
    return int(value) if value else None


def data_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh with axis ``data`` over ``devices`` (default: every device of every process);
    on CPUs with ``PE_RESEARCH_CPU_HEAP=1``, freed memory is kept from then on (``cpu_heap``)."""
    devices = jax.devices() if devices is None else list(devices)
    cpu_heap.keep_freed_memory(devices)
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def ensemble_mesh(num_members: int, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 2-D mesh ``(members, data)``: members split over as many devices as divide them evenly,
    the batch over the rest (8 devices and 16 members: 8 x 1; 8 devices and 4 members: 4 x 2)."""
    devices = jax.local_devices() if devices is None else list(devices)
    cpu_heap.keep_freed_memory(devices)
    groups = math.gcd(int(num_members), len(devices))
    return Mesh(np.asarray(devices).reshape(groups, len(devices) // groups),
                (MEMBERS_AXIS, DATA_AXIS))


def member_sharded(mesh: Mesh) -> NamedSharding:
    """The leading (member) axis split over ``members``; replicated on a mesh without one."""
    axis = MEMBERS_AXIS if MEMBERS_AXIS in mesh.axis_names else None
    return NamedSharding(mesh, PartitionSpec(axis))


def member_batch_sharded(mesh: Mesh) -> NamedSharding:
    """``[M, B, ...]`` batches: members over ``members``, rows over ``data``."""
    return NamedSharding(mesh, PartitionSpec(MEMBERS_AXIS, DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    """Every device holds the whole array (parameters, optimizer state, metrics)."""
    return NamedSharding(mesh, PartitionSpec())


def batch_sharded(mesh: Mesh) -> NamedSharding:
    """The leading (batch) axis split over ``data``; ConfigError if the mesh has no such axis."""
    if DATA_AXIS not in mesh.axis_names:
        raise ConfigError("mesh", mesh.axis_names, f"a mesh with an axis named {DATA_AXIS!r}")
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def check_batch_fits(key: str, batch_size: int, mesh: Mesh) -> None:
    """ConfigError unless a global batch of ``batch_size`` rows splits evenly over ``data``."""
    check_divisible(key, batch_size, mesh.shape[DATA_AXIS],
                    f"device count of mesh axis {DATA_AXIS!r},")


def batch_multiple(mesh: Mesh) -> int:
    """What a global batch's row count must be a multiple of: ``data``'s devices, processes."""
    return math.lcm(mesh.shape[DATA_AXIS], jax.process_count())


def to_host(x: jax.Array) -> np.ndarray:
    """A replicated array's value on this host (works when other hosts hold copies too)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(x.addressable_data(0))
    return np.asarray(x)
