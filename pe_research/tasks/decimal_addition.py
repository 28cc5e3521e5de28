"""Decimal addition of two n-digit numbers, optionally with digits reversed."""

from __future__ import annotations

from typing import Any

import numpy as np

from pe_research.core.errors import ConfigError
from pe_research.tasks.algorithmic import AlgorithmicTask, Generated, digit_symbols

PLUS = 10  # symbol index of '+'


def add_digits(a_BxN: np.ndarray, b_BxN: np.ndarray) -> np.ndarray:
    """Sum of two little-endian digit rows -> ``[B, N + 1]`` little-endian digits.

    Loop-free carries: the carry out of digit i is 1 iff the last position j <= i whose
    digit sum is not 9 has a digit sum >= 10 (every 9 in between only passes it on).
    """
    count, n = a_BxN.shape
    sums = a_BxN + b_BxN
    positions = np.where(sums != 9, np.arange(n), -1)
    last = np.maximum.accumulate(positions, axis=1)
    carry_out = (last >= 0) & (np.take_along_axis(sums, np.maximum(last, 0), axis=1) >= 10)
    carry_in = np.concatenate([np.zeros((count, 1), dtype=bool), carry_out[:, :-1]], axis=1)
    digits = (sums + carry_in) % 10
    return np.concatenate([digits, carry_out[:, -1:].astype(digits.dtype)], axis=1)


class DecimalAddition(AlgorithmicTask):
    """Add two n-digit decimal numbers.

    Source (``2n + 1`` tokens): ``a + b`` with a, b uniform in [0, 10**n - 1], each written
    with exactly n digits (leading zeros kept). Target: a + b with exactly n + 1 digits
    (the first may be 0). With ``reversed=True`` the operands and the sum are written
    least significant digit first.
    Example (n=3): ``139+072 -> 0211``; reversed: ``931+270 -> 1120``.
    """

    name, family = "addition", "extra"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"reversed": False}

    def check_config(self) -> None:
        if not isinstance(self.config["reversed"], bool):
            raise ConfigError("task.reversed", self.config["reversed"], "True or False")

    def symbols(self) -> tuple[str, ...]:
        return digit_symbols(10) + ("+",)

    def source_length(self, n: int) -> int:
        return 2 * n + 1

    def max_target_length(self, n: int) -> int:
        return n + 1

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        a, b = rng.integers(0, 10, size=(2, count, n))  # little-endian digits
        total = add_digits(a, b)
        if not self.config["reversed"]:
            a, b, total = a[:, ::-1], b[:, ::-1], total[:, ::-1]
        source = np.concatenate([a, np.full((count, 1), PLUS), b], axis=1)
        return source, total, None
