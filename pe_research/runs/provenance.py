"""What produced a run: library versions, the device, the git commit (and whether the tree was
dirty) when run from a checkout, and the command line.

``provenance.json`` in the run directory holds one entry per start of training (creation and
every resume), written whole; the same entry goes into the W&B run's config, and ``pe-research
eval`` writes the evaluating environment into its results. Numbers can move when float-level
code or a library changes, so a result is only as reproducible as this record is complete.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from pe_research.core.atomic_files import atomic_write_text

PACKAGES = ("pe_research", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy")
CHECKOUT = Path(__file__).resolve().parents[2]  # the repository, when installed from one


def package_versions() -> dict[str, str | None]:
    """``{package: version}`` of ``PACKAGES`` as installed (None where one is missing)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


@functools.cache
def git_state(root: Path = CHECKOUT) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the checkout at ``root`` (dirty: a tracked file differs from
    the commit); None when the code does not run from a git checkout of this project."""
    if not (root / ".git").exists() or not (root / "pe_research").is_dir():
        return None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=root, capture_output=True, text=True, timeout=10,
                                check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def environment() -> dict[str, Any]:
    """This process's versions, devices and checkout."""
    devices = jax.devices()
    return {"versions": package_versions(),
            "device": {"platform": jax.default_backend(), "kind": devices[0].device_kind,
                       "count": len(devices), "processes": jax.process_count()},
            "git": git_state()}


def record(path: Path, step: int, command: Sequence[str] | None = None) -> str | None:
    """Append this start of training (at ``step``) to ``path`` (``provenance.json``), written
    whole; a line naming the libraries whose versions differ from the last start, or None."""
    entries = read(path)
    entry = {"step": int(step), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **environment(),
             "command": list(sys.argv if command is None else command)}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps([*entries, entry], indent=1) + "\n")
    if not entries:
        return None
    return version_changes(entries[-1].get("versions", {}), entry["versions"])


def version_changes(before: Mapping[str, str | None], after: Mapping[str, str | None],
                    ) -> str | None:
    """``'jax 0.10.1 -> 0.10.2, numpy 2.3.0 -> 2.4.6'``, or None when nothing changed."""
    changed = [f"{name} {before.get(name)} -> {version}" for name, version in after.items()
               if before.get(name) != version]
    return ", ".join(changed) or None


def read(path: Path) -> list[dict[str, Any]]:
    """The entries of a ``provenance.json`` (none when the run predates it)."""
    return json.loads(path.read_text()) if path.is_file() else []
