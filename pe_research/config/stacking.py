"""Which configs can train stacked in one program: those equal but for ``STACKED_KEYS``.

Members of one program share the model's graph and parameter shapes and the step loop's schedule;
what is only data, a scalar of the step, or per-member bookkeeping may differ: the seed, the
optimizer's scalars (peak learning rate, weight decay, clipping norm), the model's (dropout rate,
the positional scheme's wavelength base: ``model/member_settings.py``), the task (the vocabulary is
padded to the widest member's and each member's loss is taken over its own tokens:
``training/ensemble.py``), its training and evaluation lengths, the W&B name, and whether positions
are randomized: plain members (range 0) train in a program of randomized ones (one range ``M``) on
plain positions, from the same keys (``randomized_range``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pe_research.config.files import flat_config

STACKED_KEYS = ("seed", "train.learning_rate", "train.weight_decay", "train.clip_norm",
                "data.train_lengths", "data.eval_samples", "train.eval_lengths", "eval.lengths",
                "wandb.name", "wandb.tags", "model.pe.randomize.max_position",
                "model.dropout_rate", "model.pe.max_wavelength")
STACKED_PREFIXES = ("task.",)


def stacked(key: str) -> bool:
    """Whether the dotted config ``key`` may differ between members of one program."""
    return key in STACKED_KEYS or key.startswith(STACKED_PREFIXES)


def program_key(config: Mapping[str, Any]) -> str:
    """What members of one program must share: every key of the (nested) ``config`` dict but
    the stacked ones, as text (two configs with equal keys train in one program)."""
    shared = {key: value for key, value in flat_config(dict(config)).items()
              if not stacked(key)}
    return repr(sorted(shared.items()))


def first_difference(first: Mapping[str, Any], other: Mapping[str, Any]) -> str | None:
    """The first dotted key, not stacked, whose value differs between two nested config
    dicts (None when they can train in one program)."""
    a, b = flat_config(dict(first)), flat_config(dict(other))
    for key in sorted(set(a) | set(b)):
        if not stacked(key) and a.get(key) != b.get(key):
            return key
    return None


def randomized_range(config: Mapping[str, Any]) -> int:
    """``model.pe.randomize.max_position`` of a nested config dict (0: plain positions)."""
    return int(((config.get("model") or {}).get("pe") or {}).get("randomize", {})
               .get("max_position", 0) or 0)


def ranges_stack(ranges: list[int]) -> bool:
    """Whether members of these randomized ranges can share a program: plain ones (0) and at
    most one range beyond."""
    return len({r for r in ranges if r}) <= 1
