"""What a command prints: the package's own warnings as one ``warning:`` line each."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


def one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                     lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
    """``warnings.showwarning`` for this package's own warnings: ``warning: <message>`` on one
    line, as the other warnings a command prints, not Python's file, line and source line."""
    print(f"warning: {message}", file=file or sys.stderr, flush=True)


@contextlib.contextmanager
def own_warnings_on_one_line() -> Iterator[None]:
    """While a command runs, warnings raised from ``pe_research`` show as ``one_line_warning``;
    other packages' keep Python's format."""
    previous = warnings.showwarning
    package = str(Path(__file__).resolve().parents[1]) + os.sep

    def show(message, category, filename, lineno, file=None, line=None):
        shown = one_line_warning if str(filename).startswith(package) else previous
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
