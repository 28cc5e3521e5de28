"""Classic length-generalisation tasks outside the benchmark: copy, sort, selective copy."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pe_research.core.errors import ConfigError
from pe_research.tasks.algorithmic import (
    AlgorithmicTask,
    Generated,
    StringTask,
    check_int,
    digit_symbols,
)

BLANK = "_"


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


class SelectiveCopy(AlgorithmicTask):
    """Copy the symbols of a string with blanks scattered through it, leaving the blanks out.

    Source: ``n`` symbols uniform in 0..k-1 (k = ``alphabet_size``, default 10) in order, with
    floor(b n) blanks '_' (b = ``blanks_per_token``, default 1) at uniformly random places among
    them. Target: the ``n`` symbols. The selective copying task (Gu and Dao 2023, "Mamba",
    sec. 3.1), which CoPE (Golovneva et al. 2024) trains with as many blanks as symbols and tests
    with half as many ("dense") and twice as many ("sparse"): a symbol's place in the output is
    its count among the non-blank tokens, not its distance in the source. ``blanks_per_token``
    may change at evaluation (``pe-research eval RUN --config.task.blanks_per_token=2``).
    Example (n=4, b=1): ``3_07__3_ -> 3073``.
    """

    name, family = "selective_copy", "extra"
    test_time_keys = ("blanks_per_token",)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"alphabet_size": 10, "blanks_per_token": 1.0}

    def check_config(self) -> None:
        self.alphabet_size = check_int(self.config, "alphabet_size", 2)
        blanks = self.config["blanks_per_token"]
        if isinstance(blanks, bool) or not isinstance(blanks, int | float) or not blanks >= 0:
            raise ConfigError("task.blanks_per_token", blanks, "a number >= 0 (blanks per symbol)")
        self.blanks_per_token = float(blanks)

    def symbols(self) -> tuple[str, ...]:
        return (*digit_symbols(self.alphabet_size), BLANK)

    def source_length(self, n: int) -> int:
        return n + math.floor(self.blanks_per_token * n)

    def max_target_length(self, n: int) -> int:
        return n

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        strings = rng.integers(0, self.alphabet_size, size=(count, n))
        width = self.source_length(n)
        # The n smallest of ``width`` iid keys mark a uniform n-subset of the slots.
        slots = np.sort(np.argsort(rng.random((count, width)), axis=1)[:, :n], axis=1)
        source = np.full((count, width), self.alphabet_size)  # the blank's index
        np.put_along_axis(source, slots, strings, axis=1)
        return source, strings.copy(), None
