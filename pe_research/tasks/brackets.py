"""Bracketed modular expressions (deterministic context-free): evaluate one, or solve for x."""

from __future__ import annotations

from typing import Any

import numpy as np

from pe_research.core.errors import ConfigError
from pe_research.tasks.algorithmic import AlgorithmicTask, Generated, check_int, digit_symbols

OPERATORS = ("+", "-", "*", "(", ")")


def sample_expressions(rng: np.random.Generator, count: int, length: int, modulus: int,
                       multiplication: bool) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random bracketed expressions of exactly ``length`` tokens and their values.

    Grammar of the benchmark, by length L: 1 ``d``; 2 ``-d``; 3 ``(d)``; 4 ``(-d)``;
    L >= 5 ``(A op B)`` with len(A) uniform in [1, L-4], len(B) = L-3-len(A), op uniform in
    {+, -} or {+, -, *}. Token codes: digits 0..m-1, then m + index in OPERATORS.
    Vectorised over every node of the batch: one round of draws per tree level, in the stream's
    order, then every token and value written at once.
    Returns ``(tokens [count, length], values [count])``.
    """
    plus, minus, lpar, rpar = modulus, modulus + 1, modulus + 3, modulus + 4
    rows, starts = np.arange(count), np.zeros(count, dtype=np.int64)
    sizes, nodes = np.full(count, length), np.arange(count)
    next_node, leaf_levels, internal_levels = count, [], []
    while rows.size:
        leaf = sizes <= 4
        inner = ~leaf
        leaf_levels.append((rows[leaf], starts[leaf], nodes[leaf], sizes[leaf],
                            rng.integers(0, modulus, size=int(np.count_nonzero(leaf)))))
        ir, is_, isize = rows[inner], starts[inner], sizes[inner]
        k = ir.size
        left = rng.integers(1, isize - 3)  # uniform in [1, size - 4]
        op = rng.integers(0, 3 if multiplication else 2, size=k)
        left_ids = np.arange(next_node, next_node + k)
        next_node += 2 * k
        internal_levels.append((ir, is_, isize, nodes[inner], left, op, left_ids))
        rows = np.concatenate([ir, ir])
        starts = np.concatenate([is_ + 1, is_ + 2 + left])
        sizes = np.concatenate([left, isize - 3 - left])
        nodes = np.concatenate([left_ids, left_ids + k])
    tokens = np.zeros((count, length), dtype=np.int64)
    values = np.zeros(next_node, dtype=np.int64)
    if not count:
        return tokens, values
    lr, ls, ln, lsize, digit = (np.concatenate(parts) for parts in zip(*leaf_levels, strict=True))
    negated = (lsize == 2) | (lsize == 4)
    bracketed = lsize >= 3
    offset = bracketed.astype(np.int64)
    tokens[lr[bracketed], ls[bracketed]] = lpar
    tokens[lr[negated], ls[negated] + offset[negated]] = minus
    tokens[lr, ls + offset + negated] = digit
    tokens[lr[bracketed], ls[bracketed] + lsize[bracketed] - 1] = rpar
    values[ln] = np.where(negated, -digit, digit) % modulus
    ir, is_, isize, _, left, op, _ = (np.concatenate(parts)
                                      for parts in zip(*internal_levels, strict=True))
    tokens[ir, is_] = lpar
    tokens[ir, is_ + 1 + left] = plus + op
    tokens[ir, is_ + isize - 1] = rpar
    for _, _, _, inode, _, op, left_ids in reversed(internal_levels):
        a, b = values[left_ids], values[left_ids + left_ids.size]
        values[inode] = np.where(op == 0, a + b, np.where(op == 1, a - b, a * b)) % modulus
    return tokens, values[:count]


class _Modular(AlgorithmicTask):
    def check_config(self) -> None:
        self.modulus = check_int(self.config, "modulus", 2)


class ModularArithmeticBrackets(_Modular):
    """Value, modulo ``m``, of a random bracketed expression of exactly ``n`` tokens.

    Source: an expression from the grammar of ``sample_expressions`` (digits 0..m-1,
    + - * and brackets; ``multiplication=True`` as in the benchmark's configuration).
    Target: one digit, the value mod m.
    Example (n=8, m=5): ``((-3)*4) -> 3`` (-12 = 3 mod 5).
    """

    name, family = "modular_arithmetic_brackets", "dcf"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"modulus": 5, "multiplication": True}

    def check_config(self) -> None:
        super().check_config()
        if not isinstance(self.config["multiplication"], bool):
            raise ConfigError("task.multiplication", self.config["multiplication"], "True or False")

    def symbols(self) -> tuple[str, ...]:
        return digit_symbols(self.modulus) + OPERATORS

    def max_target_length(self, n: int) -> int:
        return 1

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        tokens, values = sample_expressions(rng, count, n, self.modulus,
                                            self.config["multiplication"])
        return tokens, values[:, None], None


class SolveEquation(_Modular):
    """Solve ``expression(x) = v`` for the digit x, modulo ``m`` (only + and -: x is unique).

    Source (``n`` tokens, n >= 3): a bracketed +/- expression of n-2 tokens in which one
    digit is replaced by 'x' (a uniform position, moved right cyclically to the next digit,
    as in the benchmark), then '=' and the value v of the original expression.
    Target: one digit, the replaced digit.
    Example (n=10, m=5): ``(x-(-4))=1 -> 2`` ((2 + 4) mod 5 = 1).
    """

    name, family = "solve_equation", "dcf"
    min_length = 3

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"modulus": 5}

    def symbols(self) -> tuple[str, ...]:
        return digit_symbols(self.modulus) + OPERATORS + ("x", "=")

    def max_target_length(self, n: int) -> int:
        return 1

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        m, width = self.modulus, n - 2
        tokens, values = sample_expressions(rng, count, width, m, multiplication=False)
        is_digit = tokens < m
        positions = np.where(is_digit, np.arange(width), width)
        next_digit = np.minimum.accumulate(positions[:, ::-1], axis=1)[:, ::-1]
        start = rng.integers(0, width, size=count)
        rows = np.arange(count)
        chosen = next_digit[rows, start]
        chosen = np.where(chosen == width, next_digit[:, 0], chosen)  # wrap around
        solution = tokens[rows, chosen].copy()
        tokens[rows, chosen] = m + len(OPERATORS)  # 'x'
        equals = np.full((count, 1), m + len(OPERATORS) + 1)
        source = np.concatenate([tokens, equals, values[:, None]], axis=1)
        return source, solution[:, None], None
