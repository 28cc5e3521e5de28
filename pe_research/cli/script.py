"""What the experiment scripts share: one-line errors, and figures and numbers written whole."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from pe_research import runtime
from pe_research.core.atomic_files import atomic_savefig, atomic_write_text
from pe_research.core.errors import UsageError


def run_script(main: Callable[[], Any]) -> None:
    """Run a script's ``main`` after ``runtime.setup()``; bad input (UsageError, ConfigError)
    ends in one line, exit 2."""
    runtime.setup()
    try:
        main()
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


def write_outputs(figure: Figure, out: Path, record: Any = None,
                  numbers: Path | None = None) -> None:
    """Save ``figure`` to ``out`` and ``record`` as JSON to ``numbers`` (when given), each
    atomically, and print where they went."""
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_savefig(figure, out, dpi=110)
    print(f"\nfigure: {out}")
    if numbers:
        numbers.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(numbers, json.dumps(record, indent=1))
        print(f"numbers: {numbers}")
