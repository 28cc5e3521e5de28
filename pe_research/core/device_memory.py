"""How much memory a device has for this process: an accelerator's limit, or a CPU process's share
of the host (its RAM or memory cgroup limit, divided among a local sweep's workers)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SHARING_ENV = "PE_RESEARCH_PROCESSES_SHARING_HOST"  # set by a local sweep for its workers


def device_memory_bytes(device: Any) -> int:
    """The device's memory (an accelerator's limit; for a CPU, what the host lets us have)."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return host_memory_bytes()


def host_memory_bytes(root: Path = Path("/")) -> int:
    """This process's share of the host's memory: the RAM, or less where its memory cgroup (a
    container, a SLURM job's ``--mem``) or one above it allows less (a batch sized to the RAM
    of a shared node would get the job killed instead of split), divided among the processes
    of a local sweep that run beside it (``SHARING_ENV``)."""
    return _host_limit_bytes(root) // max(1, int(os.environ.get(SHARING_ENV) or 1))


def _host_limit_bytes(root: Path) -> int:
    """The RAM or the least memory cgroup limit above this process, whichever is less."""
    limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for directory in _memory_cgroups(root):
        for name in ("memory.max", "memory.limit_in_bytes"):  # cgroup v2, v1
            try:
                text = (directory / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit():  # v2 writes "max" for no limit; v1 a number above any RAM
                limit = min(limit, int(text))
    return limit


def _memory_cgroups(root: Path) -> list[Path]:
    """Directories of this process's memory cgroup and of its ancestors, as mounted under
    ``root``; inside a container whose cgroup is mounted as the root, the path from
    ``/proc/self/cgroup`` may not exist there, and the mount's own directory holds the limit."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    directories = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            mount = root / "sys/fs/cgroup"
        elif "memory" in controllers.split(","):
            mount = root / "sys/fs/cgroup/memory"
        else:
            continue
        relative = Path(path.lstrip("/"))
        directories += [mount / part for part in (relative, *relative.parents)]
    return directories
