"""Lists of names and numbers inside generated sentences."""

from __future__ import annotations

from collections.abc import Sequence


def name_list(names: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'; names holding a comma ('pe.type=dape, base=alibi') are
    separated by semicolons, so each stays one name."""
    if len(names) == 1:
        return names[0]
    separator = "; " if any(", " in name for name in names) else ", "
    return f"{separator.join(names[:-1])} and {names[-1]}"
