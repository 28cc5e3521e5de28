"""Corpora that need no download: the source of the Python standard library at hand."""

from __future__ import annotations

import platform
import sysconfig
from pathlib import Path

from pe_research.core.atomic_files import atomic_write_text


def stdlib_sources() -> list[Path]:
    """The top-level modules of this interpreter's standard library (``*.py``), sorted."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def write_stdlib_corpus(path: str | Path) -> tuple[Path, int, str]:
    """Write every top-level stdlib module, in name order, into one text file (atomically).

    Returns ``(path, characters, python version)``: the text differs between Python versions,
    so a result names the version it was measured on.
    """
    sources = stdlib_sources()
    if not sources:
        raise FileNotFoundError(f"no *.py files under {sysconfig.get_paths()['stdlib']}")
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in sources)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path, len(text), platform.python_version()
