"""Classic length-generalisation tasks outside the benchmark: copy and sort."""

from __future__ import annotations

from typing import Any

import numpy as np

from pe_research.errors import ConfigError
from pe_research.tasks.algorithmic import (
    AlgorithmicTask,
    Generated,
    StringTask,
    check_int,
    digit_symbols,
)


class Copy(StringTask):
    """Copy the string.

    Source: ``n`` symbols uniform in 0..k-1 (k = ``alphabet_size``, default 10; symbols
    are the numbers '0', '1', ...). Target: the same ``n`` symbols.
    Example (n=4): ``3073 -> 3073``.
    """

    name, family = "copy", "extra"

    default_alphabet_size = 10

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        strings = self.strings(rng, n, count)
        return strings, strings.copy(), None


class Sort(AlgorithmicTask):
    """Sort symbols of a large ordered alphabet (distinct by default).

    Source: ``n`` symbols from 0..k-1 (k = ``alphabet_size``, default 1000; written '0',
    '1', ...), drawn without replacement when ``distinct`` (then n <= k), else uniformly.
    Target: the same symbols in increasing order (``n`` tokens).
    Example (n=4): ``512 7 90 8 -> 7 8 90 512``.
    """

    name, family = "sort", "extra"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"alphabet_size": 1000, "distinct": True}

    def check_config(self) -> None:
        self.alphabet_size = check_int(self.config, "alphabet_size", 2)
        if not isinstance(self.config["distinct"], bool):
            raise ConfigError("task.distinct", self.config["distinct"], "True or False")
        self.max_length = self.alphabet_size if self.config["distinct"] else None

    def symbols(self) -> tuple[str, ...]:
        return digit_symbols(self.alphabet_size)

    def max_target_length(self, n: int) -> int:
        return n

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        k = self.alphabet_size
        if self.config["distinct"]:
            # The n smallest of k iid keys are a uniform n-subset; then shuffle its order.
            keys = rng.random((count, k))
            chosen = np.argpartition(keys, n - 1, axis=1)[:, :n] if n < k else np.tile(
                np.arange(k), (count, 1))
            strings = rng.permuted(chosen, axis=1)
        else:
            strings = rng.integers(0, k, size=(count, n))
        return strings, np.sort(strings, axis=1), None
