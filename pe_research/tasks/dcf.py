"""Deterministic context-free string tasks: stack manipulation and string reversal."""

from __future__ import annotations

import numpy as np

from pe_research.tasks.algorithmic import AlgorithmicTask, Generated, StringTask

POP, PUSH0, PUSH1 = 2, 3, 4  # symbol indices after the bits '0', '1'


def final_stacks(tokens_BxN: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run every row as stack operations; the stack read top-to-bottom and its size.

    A bit b or PUSHb pushes b, POP pops (ignored on an empty stack). The height is the walk
    of +-1 steps reflected at 0, ``h_t = S_t - min(0, min_{u<=t} S_u)``; a push at time t
    survives iff the height never drops below ``h_t`` afterwards, and then sits at depth
    ``H - h_t`` from the top of the final stack of height H.
    Returns ``(stack [B, N] padded with 0, sizes [B])``.
    """
    count, n = tokens_BxN.shape
    is_push = tokens_BxN != POP
    walk = np.cumsum(np.where(is_push, 1, -1), axis=1)
    height = walk - np.minimum(np.minimum.accumulate(walk, axis=1), 0)
    later_min = np.minimum.accumulate(height[:, ::-1], axis=1)[:, ::-1]
    later_min = np.concatenate([later_min[:, 1:], np.full((count, 1), n + 1)], axis=1)
    survives = is_push & (later_min >= height)
    sizes = height[:, -1]
    rows, times = np.nonzero(survives)
    pushed = np.where(tokens_BxN >= PUSH0, tokens_BxN - PUSH0, tokens_BxN)
    stack = np.zeros((count, n), dtype=np.int64)
    stack[rows, sizes[rows] - height[rows, times]] = pushed[rows, times]
    return stack, sizes


class StackManipulation(AlgorithmicTask):
    """Execute stack operations on an initial stack; output the final stack top-first.

    Source (``n`` tokens): an initial stack of s bits (bottom to top, s uniform in
    [1, n-1]; s = 1 when n = 1) followed by n - s actions uniform in {POP, PUSH0, PUSH1};
    POP on an empty stack does nothing. Target: the final stack from top to bottom (0 to n
    bits, then EOS, where the benchmark writes its termination token).
    Example (n=7): ``0 1 1 0 PUSH1 POP POP -> 1 1 0``.
    """

    name, family = "stack_manipulation", "dcf"

    def symbols(self) -> tuple[str, ...]:
        return ("0", "1", "POP", "PUSH0", "PUSH1")

    def max_target_length(self, n: int) -> int:
        return n

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        stack_sizes = rng.integers(1, max(n, 2), size=count)
        bits = rng.integers(0, 2, size=(count, n))
        actions = rng.integers(POP, PUSH1 + 1, size=(count, n))
        tokens = np.where(np.arange(n) < stack_sizes[:, None], bits, actions)
        stack, sizes = final_stacks(tokens)
        return tokens, stack, sizes


class ReverseString(StringTask):
    """Reverse a string.

    Source: ``n`` symbols uniform in 0..k-1 (k = ``alphabet_size``, 2 in the benchmark).
    Target: the same symbols in reverse order (``n`` tokens).
    Example (n=6): ``011010 -> 010110``.
    """

    name, family = "reverse_string", "dcf"

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        strings = self.strings(rng, n, count)
        return strings, strings[:, ::-1], None
