"""Decimal addition in the formats of the arithmetic length-generalization papers."""

from __future__ import annotations

from typing import Any

import numpy as np

from pe_research.core.errors import ConfigError, check_choice
from pe_research.tasks.algorithmic import AlgorithmicTask, Generated, digit_symbols
from pe_research.tasks.base import Examples
from pe_research.tasks.digit_positions import abacus_ids, coupled_ids
from pe_research.tasks.vocabulary import PAD_ID

PLUS = 10  # symbol index of '+'
OPERAND_LENGTHS = ("equal", "per_pair")
# The 102 index-hint symbols of mcleish7/arithmetic ``create_data_split.py`` (``pick_char_set``).
HINT_SYMBOLS = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwyz!@£#$%^&*()~?.,<>{}[]:;/|"
                     "βΓΔδεζηθκΛλμΞξΠπΣςτΦφχΨψΩω")


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


def natural_number(rng: np.random.Generator, widths_B: np.ndarray, n: int) -> np.ndarray:
    """``[B, n]`` little-endian digits of numbers of ``widths_B`` digits (no leading zero but
    at one digit, 0-9, as both papers sample); 0 above each width."""
    rows = len(widths_B)
    digits = rng.integers(0, 10, size=(rows, n))
    lead = rng.integers(1, 10, size=rows)
    top = np.arange(n)[None, :] == (widths_B - 1)[:, None]
    digits = np.where(top & (widths_B > 1)[:, None], lead[:, None], digits)
    return np.where(np.arange(n)[None, :] < widths_B[:, None], digits, 0)


def written(digits_BxN: np.ndarray, widths_B: np.ndarray, reversed_: bool,
            ) -> tuple[np.ndarray, np.ndarray]:
    """Little-endian digits written out left-aligned at ``widths_B`` digits per row: symbols
    and each column's significance (0: units), -1 past the width."""
    column = np.arange(digits_BxN.shape[1])[None, :]
    inside = column < widths_B[:, None]
    significance = np.where(inside, column if reversed_ else widths_B[:, None] - 1 - column, -1)
    symbols = np.take_along_axis(digits_BxN, np.maximum(significance, 0), axis=1)
    return np.where(inside, symbols, -1), significance


def hinted(symbols_BxW: np.ndarray, significance_BxW: np.ndarray, start_B: np.ndarray,
           ) -> tuple[np.ndarray, np.ndarray]:
    """Each digit preceded by the hint of its significance, ``HINT_SYMBOLS[(start + i) % 102]``
    (symbol index ``PLUS + 1 + ...``): ``[B, 2W]`` symbols and significances (a hint's -1)."""
    hint = np.where(significance_BxW >= 0,
                    PLUS + 1 + (start_B[:, None] + significance_BxW) % len(HINT_SYMBOLS), -1)
    interleave = lambda x, y: np.stack([x, y], axis=2).reshape(len(x), -1)  # noqa: E731
    return (interleave(hint, symbols_BxW),
            interleave(np.full_like(significance_BxW, -1), significance_BxW))


def joined(parts: list[np.ndarray], widths: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Left-aligned rows of several parts (``widths[k]`` entries of ``parts[k]`` each) joined
    end to end: ``[B, sum of part widths]`` (-1 past each row's end) and each row's width."""
    rows, total = len(parts[0]), sum(part.shape[1] for part in parts)
    out = np.full((rows, total + 1), -1, dtype=np.int64)  # the last column takes what is cut
    offset = np.zeros(rows, dtype=np.int64)
    for part, width in zip(parts, widths, strict=True):
        column = np.arange(part.shape[1])[None, :]
        destination = np.where(column < width[:, None], offset[:, None] + column, total)
        out[np.arange(rows)[:, None], destination] = part
        offset = offset + width
    out[:, total] = -1
    return np.where(np.arange(total + 1)[None, :] < offset[:, None], out, -1)[:, :total], offset


class DecimalAddition(AlgorithmicTask):
    """Add two decimal numbers of up to n digits.

    Default (the original format): ``a + b`` with a, b uniform in [0, 10**n - 1], each written
    with exactly n digits (leading zeros kept); the target a + b with exactly n + 1 digits.
    Example (n=3): ``139+072 -> 0211``; reversed: ``931+270 -> 1120``.

    Keys, for the formats of the arithmetic papers:

    * ``reversed``: the sum written least significant digit first, and the operands too unless
      ``reversed_operands`` is False (True: Abacus' format; False: position coupling's);
    * ``operand_lengths``: ``equal`` (both n digits), or ``per_pair``: in training one operand
      has n digits and the other a length uniform in [1, n], the longer one either operand (the
      papers sample the two lengths per pair); evaluation always adds two n-digit numbers;
    * ``zero_pad``: operands padded with leading zeros to n digits and the sum to n + 1
      (position coupling's format); False writes each number at its own width.
      Outside the original format (equal lengths, zero-padded) every number of w digits is
      drawn with a non-zero leading digit (0-9 at one digit), as the papers draw them;
    * ``index_hints``: each digit preceded by a hint symbol for its significance, hints
      consecutive from a random start among 102 (Zhou et al. 2024; mcleish7/arithmetic
      ``create_data_split.py``, ``pick_char_set``/``hints_helper``), in the sum too.

    Position IDs (``positions``): ``abacus`` always, ``coupled`` without index hints.
    """

    name, family = "addition", "extra"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"reversed": False, "reversed_operands": True, "operand_lengths": "equal",
                "zero_pad": True, "index_hints": False}

    def check_config(self) -> None:
        for key in ("reversed", "reversed_operands", "zero_pad", "index_hints"):
            if not isinstance(self.config[key], bool):
                raise ConfigError(f"task.{key}", self.config[key], "True or False")
        check_choice("task.operand_lengths", self.config["operand_lengths"], OPERAND_LENGTHS)
        if self.config["index_hints"]:
            self.max_length = len(HINT_SYMBOLS) - 1  # the sum's n + 1 hints stay distinct
        self.position_kinds = ("abacus",) if self.config["index_hints"] else ("abacus",
                                                                               "coupled")

    def symbols(self) -> tuple[str, ...]:
        hints = HINT_SYMBOLS if self.config["index_hints"] else ()
        return digit_symbols(10) + ("+",) + hints

    def source_length(self, n: int) -> int:
        return (2 if self.config["index_hints"] else 1) * 2 * n + 1

    def max_target_length(self, n: int) -> int:
        return (2 if self.config["index_hints"] else 1) * (n + 1)

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        """Symbol rows as other generated tasks give them (``examples_of_length`` is used)."""
        examples = self.examples_of_length(rng, n, count)
        offset = self.vocabulary.first_symbol_id
        return (np.where(examples.source > 0, examples.source - offset, -1),
                np.where(examples.target > 0, examples.target - offset, -1),
                examples.target_lengths)

    def examples_of_length(self, rng: np.random.Generator, n: int, count: int,
                           evaluation: bool = False) -> Examples:
        """``count`` examples of length n in the configured format, with their position IDs;
        ``evaluation`` adds two n-digit numbers whatever ``operand_lengths`` says."""
        config, full = self.config, np.full(count, n)
        if config["operand_lengths"] == "equal" and config["zero_pad"]:
            a, b = rng.integers(0, 10, size=(2, count, n))  # the original format's draws
            a_widths = b_widths = full
        else:
            a_widths, b_widths = self._operand_widths(rng, n, count, evaluation)
            a, b = natural_number(rng, a_widths, n), natural_number(rng, b_widths, n)
        start = (rng.integers(0, len(HINT_SYMBOLS), size=count) if config["index_hints"]
                 else None)
        return self.written_examples(a, b, a_widths, b_widths, n, start)

    def written_examples(self, a_BxN: np.ndarray, b_BxN: np.ndarray, a_widths_B: np.ndarray,
                         b_widths_B: np.ndarray, n: int,
                         hint_start_B: np.ndarray | None = None) -> Examples:
        """Examples of length n adding little-endian digit rows of ``*_widths`` digits, in the
        configured format, with their position IDs (``hint_start``: with index hints)."""
        config, count = self.config, len(a_BxN)
        total = add_digits(a_BxN, b_BxN)
        full = np.full(count, n)
        if config["zero_pad"]:
            a_widths_B, b_widths_B, sum_widths = full, full, full + 1
        else:
            sum_widths = np.max(np.where(total > 0, np.arange(n + 1)[None, :] + 1, 1), axis=1)
        operands_reversed = config["reversed"] and config["reversed_operands"]
        parts = [written(digits, widths, reversed_) for digits, widths, reversed_ in
                 ((a_BxN, a_widths_B, operands_reversed), (b_BxN, b_widths_B, operands_reversed),
                  (total, sum_widths, config["reversed"]))]
        widths = [a_widths_B, b_widths_B, sum_widths]
        if config["index_hints"]:
            parts = [hinted(symbols, significance, hint_start_B)
                     for symbols, significance in parts]
            widths = [2 * w for w in widths]
        (a_sym, a_sig), (b_sym, b_sig), (target, target_sig) = parts
        ones = np.ones(count, int)
        source, source_widths = joined([a_sym, np.full((count, 1), PLUS), b_sym],
                                       [widths[0], ones, widths[1]])
        source_sig, _ = joined([a_sig, np.full((count, 1), -1), b_sig],
                               [widths[0], ones, widths[1]])
        return self._examples(source, source_widths, source_sig, target, widths[2], target_sig,
                              n)

    def eval_examples_of_length(self, rng: np.random.Generator, n: int,
                                count: int) -> Examples:
        return self.examples_of_length(rng, n, count, evaluation=True)

    def _operand_widths(self, rng: np.random.Generator, n: int, count: int,
                        evaluation: bool) -> tuple[np.ndarray, np.ndarray]:
        full = np.full(count, n)
        if evaluation or self.config["operand_lengths"] == "equal":
            return full, full
        shorter = rng.integers(1, n + 1, size=count)
        first_longer = rng.random(count) < 0.5
        return np.where(first_longer, full, shorter), np.where(first_longer, shorter, full)

    def _examples(self, source: np.ndarray, source_widths: np.ndarray, source_sig: np.ndarray,
                  target: np.ndarray, target_widths: np.ndarray, target_sig: np.ndarray,
                  n: int) -> Examples:
        """Symbol rows (-1 past each row's end) -> vocabulary ids with their position IDs."""
        offset = self.vocabulary.first_symbol_id
        positions = {"abacus": abacus_ids((source >= 0) & (source < PLUS),
                                          (target >= 0) & (target < PLUS))}
        if "coupled" in self.position_kinds:
            positions["coupled"] = coupled_ids(source_sig, source == PLUS, target_sig)
        return Examples(
            source=np.where(source >= 0, source + offset, PAD_ID).astype(np.int32),
            source_lengths=source_widths.astype(np.int32),
            target=np.where(target >= 0, target + offset, PAD_ID).astype(np.int32),
            target_lengths=target_widths.astype(np.int32),
            lengths=np.full(len(source), n, dtype=np.int32),
            positions=positions)
