"""Context-sensitive string tasks of the benchmark: duplicate, missing symbol, odds first, sort."""

from __future__ import annotations

import numpy as np

from pe_research.tasks.algorithmic import AlgorithmicTask, Generated, StringTask


class DuplicateString(StringTask):
    """Write the string twice.

    Source: ``n`` symbols (binary in the benchmark). Target: the string twice, ``2n`` tokens.
    Example (n=3): ``101 -> 101101``.
    """

    name, family = "duplicate_string", "cs"

    def max_target_length(self, n: int) -> int:
        return 2 * n

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        strings = self.strings(rng, n, count)
        return strings, np.concatenate([strings, strings], axis=1), None


class OddsFirst(StringTask):
    """Symbols at odd positions first, then those at even positions (0-indexed).

    Source: ``n`` symbols s_0 .. s_{n-1}. Target: s_1 s_3 s_5 ... then s_0 s_2 s_4 ...
    (``n`` tokens). This is what the benchmark's generator computes; its docstring's
    1-indexed examples show the other order.
    Example (n=8): ``00110101 -> 01110100``.
    """

    name, family = "odds_first", "cs"

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        strings = self.strings(rng, n, count)
        return strings, np.concatenate([strings[:, 1::2], strings[:, 0::2]], axis=1), None


class BucketSort(StringTask):
    """Sort symbols of a small alphabet in increasing order.

    Source: ``n`` symbols uniform in 0..k-1 (k = 5 in the benchmark). Target: the same
    multiset in increasing order (``n`` tokens).
    Example (n=8): ``10204112 -> 00111224``.
    """

    name, family = "bucket_sort", "cs"
    default_alphabet_size = 5

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        strings = self.strings(rng, n, count)
        return strings, np.sort(strings, axis=1), None


class MissingDuplicateString(AlgorithmicTask):
    """Find the bit hidden by '_' in a string written twice.

    Source (``n`` tokens, n >= 2): a binary string w of length n//2 written twice (ww), one
    uniform position replaced by '_', then '#' when n is odd. Target: the hidden bit.
    Example (n=8): ``0110_110 -> 0``; (n=7): ``101_01# -> 1``.
    """

    name, family = "missing_duplicate_string", "cs"
    min_length = 2

    def symbols(self) -> tuple[str, ...]:
        return ("0", "1", "_", "#")

    def max_target_length(self, n: int) -> int:
        return 1

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        half = n // 2
        strings = rng.integers(0, 2, size=(count, half))
        doubled = np.concatenate([strings, strings], axis=1)
        hidden = rng.integers(0, 2 * half, size=count)
        rows = np.arange(count)
        answer = doubled[rows, hidden].copy()
        doubled[rows, hidden] = 2
        source = np.concatenate([doubled, np.full((count, n % 2), 3)], axis=1)
        return source, answer[:, None], None
