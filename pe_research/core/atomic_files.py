"""Atomic file writes: write a temporary sibling, flush it to disk, ``os.replace`` it in.

A reader (or a crash) sees either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """A file handle whose contents replace ``path`` only when the block exits cleanly."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Replace ``path`` with ``text`` atomically."""
    with atomic_open(path) as handle:
        handle.write(text)
    return Path(path)


def atomic_savefig(figure: Any, path: str | Path, **kwargs: Any) -> Path:
    """``figure.savefig`` to ``path`` atomically (the format comes from the suffix)."""
    path = Path(path)
    kwargs.setdefault("format", path.suffix.lstrip(".") or "png")
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, **kwargs)
    return path
