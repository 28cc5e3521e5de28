"""The regular tasks of the Chomsky-hierarchy benchmark: one-token answers, finite-state."""

from __future__ import annotations

from typing import Any

import numpy as np

from pe_research.tasks.algorithmic import AlgorithmicTask, Generated, check_int, digit_symbols


class BitsToBitTask(AlgorithmicTask):
    """Base of tasks whose source is ``n`` bits and whose target is one bit."""

    def symbols(self) -> tuple[str, ...]:
        return ("0", "1")

    def max_target_length(self, n: int) -> int:
        return 1


class EvenPairs(BitsToBitTask):
    """Is the number of unequal neighbouring pairs ('01' or '10') odd?

    Source: ``n`` bits. Target: one token, '1' if the count of unequal adjacent pairs is
    odd, else '0' (equivalently: first bit != last bit).
    Example (n=7): ``0101001 -> 1`` (two '10' and three '01' pairs: 5 is odd).
    """

    name, family = "even_pairs", "regular"

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        bits = rng.integers(0, 2, size=(count, n))
        odd = np.sum(bits[:, 1:] != bits[:, :-1], axis=1) % 2
        return bits, odd[:, None], None


class ParityCheck(BitsToBitTask):
    """Is the number of ones odd?

    Source: ``n`` bits. Target: one token, the count of '1' modulo 2.
    Example (n=7): ``1010100 -> 1`` (three ones).
    """

    name, family = "parity_check", "regular"

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        bits = rng.integers(0, 2, size=(count, n))
        return bits, (np.sum(bits, axis=1) % 2)[:, None], None


class CycleNavigation(AlgorithmicTask):
    """Final position after a walk on a cycle of ``cycle_length`` states, starting at 0.

    Source: ``n`` actions from {'left', 'stay', 'right'} (-1, 0, +1), sampled uniformly.
    Target: one token, the final state '0'..'{cycle_length - 1}'.
    Example (n=5, cycle 5): ``right left stay left left -> 3`` (1-1+0-1-1 = -2 = 3 mod 5).
    """

    name, family = "cycle_navigation", "regular"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"cycle_length": 5}

    def check_config(self) -> None:
        self.cycle_length = check_int(self.config, "cycle_length", 2)

    def symbols(self) -> tuple[str, ...]:
        return ("left", "stay", "right") + digit_symbols(self.cycle_length)

    def max_target_length(self, n: int) -> int:
        return 1

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        actions = rng.integers(0, 3, size=(count, n))
        state = np.sum(actions - 1, axis=1) % self.cycle_length
        return actions, (3 + state)[:, None], None


class ModularArithmetic(AlgorithmicTask):
    """Value of an expression over {0..m-1} with + - * (usual precedence), modulo ``m``.

    Source: ``d o d o ... d`` with digits uniform in 0..m-1 and operators uniform in
    {+, -, *}; its length is ``n`` when ``n`` is odd and ``n - 1`` otherwise (as the
    benchmark, which drops one token from even lengths). Target: one digit, the value mod m.
    Example (n=5 or n=6, m=5): ``1+2*3 -> 2`` (7 mod 5); ``1-1-1 -> 4`` (-1 mod 5).
    """

    name, family = "modular_arithmetic", "regular"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"modulus": 5}

    def check_config(self) -> None:
        self.modulus = check_int(self.config, "modulus", 2)

    def symbols(self) -> tuple[str, ...]:
        return digit_symbols(self.modulus) + ("+", "-", "*")

    def source_length(self, n: int) -> int:
        return n if n % 2 else n - 1

    def max_target_length(self, n: int) -> int:
        return 1

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        m = self.modulus
        num_ops = self.source_length(n) // 2
        digits = rng.integers(0, m, size=(count, num_ops + 1))
        ops = rng.integers(0, 3, size=(count, num_ops))  # 0 '+', 1 '-', 2 '*'
        # Left-to-right scan: `total` holds finished terms, `term` the signed running product
        # (congruent mod m); each column's operator is read for all columns before the scan.
        starts = (ops != 2).T  # a '+' or '-' ends a term and starts the next
        following = digits[:, 1:].T
        signed = np.where(ops.T == 1, -following, following)
        total = np.zeros(count, dtype=np.int64)
        term = digits[:, 0].astype(np.int64)
        for i in range(num_ops):
            total += term * starts[i]
            term = np.where(starts[i], signed[i], term * following[i] % m)
        value = (total + term) % m
        source = np.empty((count, 2 * num_ops + 1), dtype=np.int64)
        source[:, 0::2] = digits
        source[:, 1::2] = m + ops
        return source, value[:, None], None
