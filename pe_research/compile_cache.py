"""JAX's persistent compilation cache, on by default for the command line and the scripts.

A program compiled once (a train step, an evaluation shape) is stored on disk and loaded, not
compiled again, by the next process that builds the same program: another seed of a sweep, a
resumed run, ``pe-research eval`` of a second checkpoint. Compiling is seconds per program on a
CPU and 10-35 s on a GPU (benchmarks/RESULTS.md, "Compilation cache").

Where: ``$PE_RESEARCH_COMPILATION_CACHE`` (a directory, or ``0`` / ``off`` for no cache), else
``$XDG_CACHE_HOME/pe_research/jax-<host>`` (``~/.cache`` by default). ``<host>`` is a digest of
the machine's architecture and CPU model and flags: XLA's CPU code is built for the host's
instruction set, and a home directory shared by cluster nodes of several CPU generations then
holds one cache per kind of node. A cache the user set up for JAX itself
(``JAX_COMPILATION_CACHE_DIR``) is used as it is.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from pathlib import Path

import jax

SWITCH_ENV = "PE_RESEARCH_COMPILATION_CACHE"
OFF = ("0", "off", "false", "no")
MIN_COMPILE_SECONDS = 0.2  # programs faster to compile than to read back are not stored
MAX_BYTES = 4 * 2**30  # least recently used programs are evicted beyond this
HIT_EVENT = "/jax/compilation_cache/cache_hits"


class _HitCounter:
    """Counts the cache's hits through ``jax.monitoring`` (registered once per process)."""

    def __init__(self) -> None:
        self.count = 0
        self.listening = False

    def listen(self) -> None:
        if not self.listening:
            jax.monitoring.register_event_listener(self.record)
            self.listening = True

    def record(self, event: str, **_: object) -> None:
        if event == HIT_EVENT:
            self.count += 1


_HITS = _HitCounter()


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


def default_directory() -> Path:
    """``$XDG_CACHE_HOME/pe_research/jax-<host tag>``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pe_research" / f"jax-{host_tag()}"


def enable() -> Path | None:
    """Switch the cache on for this process (before its first compile); the directory used,
    or None when it is switched off."""
    _HITS.listen()
    chosen = jax.config.values.get("jax_compilation_cache_dir")  # JAX reads its variable
    if chosen:
        return Path(chosen)
    setting = os.environ.get(SWITCH_ENV, "").strip()
    if setting.lower() in OFF:
        return None
    directory = Path(setting).expanduser() if setting else default_directory()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        writable = os.access(directory, os.W_OK)
    except OSError as error:
        writable, reason = False, error.strerror
    else:
        reason = "not writable"
    if not writable:
        print(f"compilation cache off: cannot use {directory} ({reason}); set {SWITCH_ENV} to "
              f"a directory you can write to, or to 0", file=sys.stderr)
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    if "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ:
        jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return directory


def hits() -> int:
    """Programs this process loaded from the cache instead of compiling them."""
    return _HITS.count


def loaded_note() -> str:
    """``", 3 loaded from the compilation cache"`` for a summary line; '' when none was."""
    return f", {hits()} loaded from the compilation cache" if hits() else ""
