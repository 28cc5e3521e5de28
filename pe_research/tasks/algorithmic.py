"""Base class of the generated tasks: a vectorised sampler per length, nothing stored."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from pe_research.core.errors import ConfigError
from pe_research.tasks.base import LENGTH_SAMPLING, Examples, Task, check_length_range
from pe_research.tasks.vocabulary import PAD_ID, Vocabulary

# (source [count, S], target [count, T], target lengths [count] or None), as symbol indices.
Generated = tuple[np.ndarray, np.ndarray, np.ndarray | None]
# Stream tag of evaluation sets, so they never coincide with a training batch's stream.
EVAL_STREAM = 0x5EED_E7A1


class AlgorithmicTask(Task):
    """A task whose examples are sampled on the fly, exactly determined by the rng given.

    Subclasses define ``symbols`` (task tokens; symbol k gets vocabulary id 3 + k),
    ``source_length(n)``, ``max_target_length(n)`` and ``generate``.
    """

    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        self.check_config()
        self.vocabulary = Vocabulary(self.symbols())

    def check_config(self) -> None:
        """ConfigError for a bad task parameter (called once, from ``__init__``)."""

    @abc.abstractmethod
    def symbols(self) -> tuple[str, ...]:
        """The task's tokens, in order; generators work with their indices."""

    def source_length(self, n: int) -> int:
        """Source tokens of every example of length ``n``."""
        return n

    @abc.abstractmethod
    def max_target_length(self, n: int) -> int:
        """Most target tokens (without EOS) of an example of length ``n``."""

    @abc.abstractmethod
    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        """``count`` examples of length ``n`` as symbol indices.

        Returns ``(source [count, source_length(n)], target [count, max_target_length(n)],
        target_lengths [count] or None when every target fills its row)``; entries past a
        row's target length are ignored.
        """

    # -- Task interface ------------------------------------------------------------------

    def widest(self, lengths: Iterable[int]) -> tuple[int, int]:
        longest = max(int(n) for n in lengths)  # both maps are non-decreasing in n
        return self.source_length(longest), self.max_target_length(longest)

    def max_lengths(self, keys: np.ndarray) -> tuple[int, int]:
        return self.widest([int(np.max(keys))])

    def draw_train_keys(self, rng: np.random.Generator, count: int,
                        train_lengths: Sequence[int], length_sampling: str) -> np.ndarray:
        low, high = check_length_range(train_lengths)
        self.check_lengths((low, high), "data.train_lengths")
        if length_sampling == "per_batch":
            return np.full(count, rng.integers(low, high + 1), dtype=np.int32)
        if length_sampling == "mixed":
            return rng.integers(low, high + 1, size=count).astype(np.int32)
        raise ConfigError("data.length_sampling", length_sampling,
                          f"choose one of {LENGTH_SAMPLING}")

    def make_examples(self, keys: np.ndarray, rng: np.random.Generator) -> Examples:
        keys = np.asarray(keys, dtype=np.int32)
        if keys.size and (keys == keys[0]).all():  # one length per batch, the usual case
            self.check_lengths((keys[0],), "length")
            return self.examples_of_length(rng, int(keys[0]), keys.size)
        unique = np.unique(keys)
        self.check_lengths(unique, "length")
        groups = []
        order = []
        for n in unique:
            rows = np.flatnonzero(keys == n)
            groups.append(self.examples_of_length(rng, int(n), len(rows)))
            order.append(rows)
        examples = Examples.concatenate(groups)
        return examples.take(np.argsort(np.concatenate(order), kind="stable"))

    def eval_examples(self, lengths: Sequence[int], samples_per_length: int,
                      seed: int) -> Examples:
        self.check_lengths(lengths, "eval.lengths")
        groups = [self.eval_examples_of_length(
            np.random.default_rng([seed, EVAL_STREAM, int(n)]), int(n), samples_per_length)
            for n in lengths]
        return Examples.concatenate(groups)

    def eval_examples_of_length(self, rng: np.random.Generator, n: int,
                                count: int) -> Examples:
        """The evaluation set's examples of length ``n`` (the training ones by default)."""
        return self.examples_of_length(rng, n, count)

    def examples_of_length(self, rng: np.random.Generator, n: int, count: int) -> Examples:
        """``count`` examples of length ``n`` as vocabulary ids, padded with PAD_ID."""
        source, target, target_lengths = self.generate(rng, n, count)
        width_t = self.max_target_length(n)
        assert source.shape == (count, self.source_length(n)), (self.name, source.shape)
        assert target.shape == (count, width_t), (self.name, target.shape, width_t)
        offset = self.vocabulary.first_symbol_id
        if target_lengths is None:  # every row full: nothing to blank
            target_lengths = np.full(count, width_t, dtype=np.int32)
            target = target + offset
        else:
            target = np.where(np.arange(width_t) < target_lengths[:, None], target + offset, PAD_ID)
        return Examples(
            source=(source + offset).astype(np.int32),
            source_lengths=np.full(count, source.shape[1], dtype=np.int32),
            target=target.astype(np.int32),
            target_lengths=np.asarray(target_lengths, dtype=np.int32),
            lengths=np.full(count, n, dtype=np.int32),
        )


def check_int(config: Mapping[str, Any], key: str, minimum: int) -> int:
    """The integer ``config[key]``; ConfigError if it is below ``minimum``."""
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ConfigError(f"task.{key}", value, f"an integer >= {minimum}")
    return int(value)


def digit_symbols(count: int) -> tuple[str, ...]:
    """``('0', '1', ..., str(count - 1))``."""
    return tuple(str(d) for d in range(count))


class StringTask(AlgorithmicTask):
    """Base of tasks whose source is ``n`` symbols uniform in 0..k-1, k = ``alphabet_size``."""

    default_alphabet_size = 2

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"alphabet_size": cls.default_alphabet_size}

    def check_config(self) -> None:
        self.alphabet_size = check_int(self.config, "alphabet_size", 2)

    def symbols(self) -> tuple[str, ...]:
        return digit_symbols(self.alphabet_size)

    def max_target_length(self, n: int) -> int:
        return n

    def strings(self, rng: np.random.Generator, n: int, count: int) -> np.ndarray:
        """Random source strings ``[count, n]``."""
        return rng.integers(0, self.alphabet_size, size=(count, n))
