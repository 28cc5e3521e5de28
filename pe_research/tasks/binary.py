"""Binary arithmetic tasks of the benchmark: addition, multiplication, integer square root.

Operands are drawn as bit matrices; arithmetic on numbers of up to thousands of bits goes
through Python integers, converted from and to bits a row at a time with ``np.packbits``.
"""

from __future__ import annotations

import math

import numpy as np

from pe_research.tasks.algorithmic import AlgorithmicTask, Generated

PLUS = 2  # symbol index of the separator between the two operands


def bits_to_ints(bits_BxW: np.ndarray) -> list[int]:
    """Little-endian bit rows -> Python integers."""
    packed = np.packbits(bits_BxW.astype(np.uint8), axis=1, bitorder="little")
    return [int.from_bytes(row.tobytes(), "little") for row in packed]


def ints_to_bits(values: list[int], width: int) -> np.ndarray:
    """Python integers (each < 2**width) -> little-endian bit rows ``[B, width]``."""
    num_bytes = (width + 7) // 8
    raw = b"".join(v.to_bytes(num_bytes, "little") for v in values)
    bytes_BxY = np.frombuffer(raw, dtype=np.uint8).reshape(len(values), num_bytes)
    return np.unpackbits(bytes_BxY, axis=1, bitorder="little")[:, :width].astype(np.int64)


def sample_two_operands(rng: np.random.Generator, n: int, count: int
                        ) -> tuple[np.ndarray, list[int], list[int]]:
    """Sources ``a + b`` of ``n`` tokens with both operands nonzero, little-endian.

    As the benchmark: len(a) uniform in [1, n-2], len(b) = n-1-len(a), each operand uniform
    in [1, 2**len - 1] written with exactly len bits (high zeros kept).
    Returns ``(source [count, n] of symbol indices, a values, b values)``.
    """
    split = rng.integers(1, n - 1, size=count)  # len(a); the separator sits there
    positions = np.arange(n)
    in_a, in_b = positions < split[:, None], positions > split[:, None]
    bits = rng.integers(0, 2, size=(count, n))
    while True:  # rejection sampling: redraw rows whose a or b is zero
        zero = ~np.any((bits == 1) & in_a, axis=1) | ~np.any((bits == 1) & in_b, axis=1)
        if not zero.any():
            break
        bits[zero] = rng.integers(0, 2, size=(int(zero.sum()), n))
    a = bits_to_ints(np.where(in_a, bits, 0))
    b_shifted = bits_to_ints(np.where(in_b, bits, 0))
    b = [v >> (int(s) + 1) for v, s in zip(b_shifted, split, strict=True)]
    source = np.where(positions == split[:, None], PLUS, bits)
    return source, a, b


def result_bits(values: list[int], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Little-endian bits without high zeros: ``(bits [B, width], bit lengths [B])``."""
    lengths = np.asarray([v.bit_length() for v in values], dtype=np.int32)
    return ints_to_bits(values, width), lengths


class BinaryAddition(AlgorithmicTask):
    """Add two binary numbers, little-endian (least significant bit first).

    Source (``n`` tokens, n >= 3): ``a + b``, operand lengths and values as in
    ``sample_two_operands``. Target: a + b in little-endian binary without high zeros
    (at most n - 1 bits), then EOS where the benchmark writes its termination token.
    Example (n=9): ``001+01101 -> 01011`` (4 + 22 = 26).
    """

    name, family = "binary_addition", "cs"
    min_length = 3

    def symbols(self) -> tuple[str, ...]:
        return ("0", "1", "+")

    def max_target_length(self, n: int) -> int:
        return n - 1

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        source, a, b = sample_two_operands(rng, n, count)
        target, lengths = result_bits([x + y for x, y in zip(a, b, strict=True)], n - 1)
        return source, target, lengths


class BinaryMultiplication(AlgorithmicTask):
    """Multiply two binary numbers, little-endian.

    Source (``n`` tokens, n >= 3): ``a * b`` written as for binary addition (the separator
    token is '*'). Target: a * b in little-endian binary without high zeros (at most n - 1
    bits), then EOS.
    Example (n=9): ``001*01101 -> 0001101`` (4 * 22 = 88).
    """

    name, family = "binary_multiplication", "cs"
    min_length = 3

    def symbols(self) -> tuple[str, ...]:
        return ("0", "1", "*")

    def max_target_length(self, n: int) -> int:
        return n - 1

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        source, a, b = sample_two_operands(rng, n, count)
        target, lengths = result_bits([x * y for x, y in zip(a, b, strict=True)], n - 1)
        return source, target, lengths


class ComputeSqrt(AlgorithmicTask):
    """Integer square root in big-endian binary.

    Source: a number uniform in [1, 2**n - 1] as ``n`` big-endian bits (high zeros kept).
    Target: floor(sqrt(x)) as exactly ceil(n / 2) big-endian bits.
    Example (n=6): ``100101 -> 110`` (floor(sqrt(37)) = 6).
    """

    name, family = "compute_sqrt", "cs"

    def symbols(self) -> tuple[str, ...]:
        return ("0", "1")

    def max_target_length(self, n: int) -> int:
        return (n + 1) // 2

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        bits = rng.integers(0, 2, size=(count, n))
        while True:
            zero = ~np.any(bits == 1, axis=1)
            if not zero.any():
                break
            bits[zero] = rng.integers(0, 2, size=(int(zero.sum()), n))
        roots = [math.isqrt(v) for v in bits_to_ints(bits[:, ::-1])]
        width = self.max_target_length(n)
        return bits, ints_to_bits(roots, width)[:, ::-1], None
