"""Where this process runs: set-up done once (compilation cache, ``jax.distributed``), the device
mesh and the shardings every layer places arrays with.

Every entry point (the CLI, a sweep's worker, the experiment scripts, the benchmarks) calls
``setup()`` once before its first computation. Nothing else in the package changes a
process-wide setting.

The compilation cache: a program compiled once (a train step, an evaluation shape) is stored on
disk and loaded, not compiled again, by the next process that builds the same program (another
seed of a sweep, a resumed run, ``pe-research eval`` of a second checkpoint). Where:
``$PE_RESEARCH_COMPILATION_CACHE`` (a directory, or ``0`` / ``off`` for none), else
``$XDG_CACHE_HOME/pe_research/jax-<host>``, ``<host>`` a digest of the machine's architecture,
CPU model and flags: XLA's CPU code is built for the host's instruction set, so a home directory
shared by cluster nodes of several CPU generations holds one cache per kind of node. A cache the
user set up for JAX itself (``JAX_COMPILATION_CACHE_DIR``) is used as it is.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pe_research.core.errors import ConfigError, check_divisible

CACHE_ENV = "PE_RESEARCH_COMPILATION_CACHE"
DISTRIBUTED_ENV = "PE_RESEARCH_DISTRIBUTED"
OFF = ("0", "off", "false", "no")
MIN_COMPILE_SECONDS = 0.2  # programs faster to compile than to read back are not stored
MAX_CACHE_BYTES = 4 * 2**30  # least recently used programs are evicted beyond this
HIT_EVENT = "/jax/compilation_cache/cache_hits"
DATA_AXIS = "data"
MEMBERS_AXIS = "members"  # ensembles: one slice of members per group of devices


class _Process:
    """What ``setup`` did in this process: the cache directory and the cache's hits."""

    def __init__(self) -> None:
        self.done = False
        self.cache_dir: Path | None = None
        self.hits = 0

    def record(self, event: str, **_: object) -> None:
        if event == HIT_EVENT:
            self.hits += 1


_PROCESS = _Process()


def setup(*, distributed: bool = False, compilation_cache: bool = True) -> Path | None:
    """Set the process up once (later calls only start ``jax.distributed`` if newly asked):
    the compilation cache (its directory, or None when off; benchmarks that time compiling
    leave it off) and, when asked for, ``jax.distributed``. Call before the first computation."""
    if not _PROCESS.done:
        jax.monitoring.register_event_listener(_PROCESS.record)
        _PROCESS.cache_dir = _enable_compilation_cache() if compilation_cache else None
        _PROCESS.done = True
    initialize_distributed(distributed)
    return _PROCESS.cache_dir


def host_tag(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """12 hex digits naming this machine's kind: architecture, CPU model and CPU flags."""
    described = [platform.machine(), platform.processor()]
    try:
        for line in cpuinfo.read_text().splitlines():
            key = line.split(":", 1)[0].strip()
            if key in ("model name", "flags", "Features", "CPU part"):
                described.append(line)
                if key in ("flags", "Features"):
                    break  # the first processor's description is the machine's
    except OSError:
        pass
    return hashlib.sha256("\n".join(described).encode()).hexdigest()[:12]


def default_cache_directory() -> Path:
    """``$XDG_CACHE_HOME/pe_research/jax-<host tag>``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pe_research" / f"jax-{host_tag()}"


def _enable_compilation_cache() -> Path | None:
    chosen = jax.config.values.get("jax_compilation_cache_dir")  # JAX reads its own variable
    if chosen:
        return Path(chosen)
    setting = os.environ.get(CACHE_ENV, "").strip()
    if setting.lower() in OFF:
        return None
    directory = Path(setting).expanduser() if setting else default_cache_directory()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        writable = os.access(directory, os.W_OK)
    except OSError as error:
        writable, reason = False, error.strerror
    else:
        reason = "not writable"
    if not writable:
        print(f"compilation cache off: cannot use {directory} ({reason}); set {CACHE_ENV} to "
              f"a directory you can write to, or to 0", file=sys.stderr)
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ:
        jax.config.update("jax_compilation_cache_max_size", MAX_CACHE_BYTES)
    return directory


def cache_hits() -> int:
    """Programs this process loaded from the compilation cache instead of compiling them."""
    return _PROCESS.hits


def cache_note() -> str:
    """``", 3 loaded from the compilation cache"`` for a summary line; '' when none was."""
    return f", {cache_hits()} loaded from the compilation cache" if cache_hits() else ""


def cache_line() -> str | None:
    """``"compilation cache: 8 programs ... loaded instead of compiled"``; None when none was.

    Counts every program of the process (a run's evaluations too), so it is a line of its own
    rather than a note on the train step's compilations."""
    hits = cache_hits()
    if not hits:
        return None
    noun = "program" if hits == 1 else "programs"
    return (f"compilation cache: {hits} {noun} of this process (training's and evaluation's) "
            f"loaded instead of compiled")


def initialize_distributed(enabled: bool) -> None:
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


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if value and not value.isdigit():
        raise ConfigError(name, value, "a non-negative integer (an environment variable)")
    return int(value) if value else None


def sync_processes(name: str) -> None:
    """Barrier across processes (a no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def data_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh with axis ``data`` over ``devices`` (default: every device of every process)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def ensemble_mesh(num_members: int, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 2-D mesh ``(members, data)``: members split over as many devices as divide them evenly,
    the batch over the rest (8 devices and 16 members: 8 x 1; 8 devices and 4 members: 4 x 2)."""
    devices = jax.local_devices() if devices is None else list(devices)
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
