"""What every task provides: a vocabulary, length rules, and examples drawn from a plan.

A task's *length* ``n`` is the quantity that extrapolation curves are plotted against (the
benchmark's input length for algorithmic tasks, the number of output actions for SCAN).
Batches are made in two steps so that every process agrees on shapes:

1. ``draw_train_keys(rng_shared, global_batch, ...)`` -> one key per example of the *global*
   batch (a task length for generated tasks, a row index for datasets), drawn from a random
   stream that every process shares; ``max_lengths(keys)`` then fixes the padded shape;
2. ``make_examples(local_keys, rng_local)`` -> the token ids of this process's slice only.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from pe_research.core.errors import ConfigError
from pe_research.tasks.vocabulary import PAD_ID, Vocabulary

LENGTH_SAMPLING = ("per_batch", "mixed")


# kind -> (source IDs int32 [B, S], target IDs int32 [B, T + 1]): position IDs a task supplies
# beside its tokens (``Task.position_kinds``); the target's are those of the decoder's input
# slots (BOS, then each target token), 0 on padding.
TaskPositions = Mapping[str, tuple[np.ndarray, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class Examples:
    """Token ids of ``B`` examples, each row padded with PAD_ID to the widest row."""

    source: np.ndarray  # int32 [B, S]
    source_lengths: np.ndarray  # int32 [B]
    target: np.ndarray  # int32 [B, T], without BOS / EOS
    target_lengths: np.ndarray  # int32 [B]
    lengths: np.ndarray  # int32 [B], the task length n of each example
    positions: TaskPositions = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.lengths)

    @staticmethod
    def concatenate(parts: Sequence[Examples]) -> Examples:
        """Stack groups of examples along the batch axis, padding to the widest group."""
        width_s = max(p.source.shape[1] for p in parts)
        width_t = max(p.target.shape[1] for p in parts)
        return Examples(
            source=np.concatenate([pad_columns(p.source, width_s) for p in parts]),
            source_lengths=np.concatenate([p.source_lengths for p in parts]),
            target=np.concatenate([pad_columns(p.target, width_t) for p in parts]),
            target_lengths=np.concatenate([p.target_lengths for p in parts]),
            lengths=np.concatenate([p.lengths for p in parts]),
            positions={kind: (np.concatenate([pad_columns(p.positions[kind][0], width_s)
                                              for p in parts]),
                              np.concatenate([pad_columns(p.positions[kind][1], width_t + 1)
                                              for p in parts]))
                       for kind in parts[0].positions},
        )

    def take(self, rows: np.ndarray) -> Examples:
        """The examples at ``rows`` (in that order)."""
        return Examples(self.source[rows], self.source_lengths[rows], self.target[rows],
                        self.target_lengths[rows], self.lengths[rows],
                        {kind: (s[rows], t[rows]) for kind, (s, t) in self.positions.items()})


def pad_columns(x_BxL: np.ndarray, width: int, value: int = PAD_ID) -> np.ndarray:
    """Right-pad the second axis of ``x`` to ``width`` with ``value``."""
    extra = width - x_BxL.shape[1]
    if extra < 0:
        raise ValueError(f"cannot pad width {x_BxL.shape[1]} down to {width}")
    if not extra:
        return x_BxL
    # A filled array and one copy: np.pad's general machinery costs more than the copy here,
    # and an ensemble's step pads every member's batch.
    padded = np.full((x_BxL.shape[0], width), value, x_BxL.dtype)
    padded[:, :x_BxL.shape[1]] = x_BxL
    return padded


def check_length_range(train_lengths: Sequence[int], key: str = "data.train_lengths") -> tuple:
    """``(min, max)`` inclusive from a config value; ConfigError if it is not such a pair."""
    try:
        low, high = (int(v) for v in train_lengths)
    except (TypeError, ValueError):
        raise ConfigError(key, train_lengths, "a pair (min, max) of task lengths") from None
    if low > high:
        raise ConfigError(key, tuple(train_lengths), "min must not exceed max")
    return low, high


class Task(abc.ABC):
    """A source -> target problem with a length ``n`` per example; see the module docstring."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""  # 'regular', 'dcf', 'cs', 'extra' or 'text'
    metric: ClassVar[str] = "exact_match"  # the headline: what curves and tables show first
    # Keys of the task's config that change only what is tested, never the vocabulary or what
    # a trained model means: `pe-research eval` may set them on a saved run.
    test_time_keys: ClassVar[tuple[str, ...]] = ()
    # False for tasks scored by teacher forcing alone (language modelling): range evaluation
    # then decodes nothing, and the task's ``metric`` is its headline.
    decodes: ClassVar[bool] = True
    # Kinds of position IDs the task supplies beside its tokens (``Examples.positions``), for
    # the schemes that read the task's structure: ``abacus``, ``coupled`` (position coupling).
    position_kinds: ClassVar[tuple[str, ...]] = ()

    vocabulary: Vocabulary
    min_length: int = 1
    max_length: int | None = None

    def __init__(self, config: Mapping[str, Any]):
        defaults = self.default_config()
        unknown = sorted(set(config) - set(defaults) - {"name"})
        if unknown:
            raise ConfigError(f"task.{unknown[0]}", config[unknown[0]],
                              f"not a key of task {self.name!r}; its keys are {sorted(defaults)}")
        self.config: dict[str, Any] = {"name": self.name, **defaults,
                                       **{k: v for k, v in config.items() if k != "name"}}

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The task's own keys of ``config.task`` and their defaults (without ``name``)."""
        return {}

    @classmethod
    def from_config(cls, task_cfg: Mapping[str, Any], data_cfg: Mapping[str, Any],
                    vocabulary: Vocabulary | None = None) -> Task:
        """Build from ``config.task`` (and ``config.data`` where a task reads files)."""
        task = cls(task_cfg)
        if vocabulary is not None and vocabulary != task.vocabulary:
            raise ConfigError("vocabulary", vocabulary,
                              f"differs from task {cls.name!r}'s {task.vocabulary}")
        return task

    # -- lengths -----------------------------------------------------------------------

    def valid_lengths(self) -> str:
        """Human-readable set of task lengths this task can produce."""
        if self.max_length is None:
            return f"integers >= {self.min_length}"
        return f"integers in [{self.min_length}, {self.max_length}]"

    def check_lengths(self, lengths: Iterable[int], key: str) -> None:
        """ConfigError naming ``key`` if any length is one the task cannot produce."""
        values = [int(n) for n in lengths]
        bad = [n for n in values if n < self.min_length
               or (self.max_length is not None and n > self.max_length)]
        if bad:
            raise ConfigError(key, tuple(values) if len(values) > 1 else values[0],
                              f"task {self.name!r} produces lengths that are "
                              f"{self.valid_lengths()} (got {bad[0]})")

    @abc.abstractmethod
    def widest(self, lengths: Iterable[int]) -> tuple[int, int]:
        """Widest ``(source, target)`` token counts (target without EOS) at these lengths."""

    def train_widest(self, lengths: Iterable[int]) -> tuple[int, int]:
        """``widest`` over the training examples alone (a dataset's eval split can be wider)."""
        return self.widest(lengths)

    @abc.abstractmethod
    def max_lengths(self, keys: np.ndarray) -> tuple[int, int]:
        """Widest ``(source, target)`` token counts (target without EOS) over these keys."""

    # -- examples ----------------------------------------------------------------------

    @abc.abstractmethod
    def draw_train_keys(self, rng: np.random.Generator, count: int,
                        train_lengths: Sequence[int], length_sampling: str) -> np.ndarray:
        """One key per example of a global training batch ``[count]``."""

    @abc.abstractmethod
    def make_examples(self, keys: np.ndarray, rng: np.random.Generator) -> Examples:
        """Token ids for the examples named by ``keys`` (this process's slice)."""

    @abc.abstractmethod
    def eval_examples(self, lengths: Sequence[int], samples_per_length: int,
                      seed: int) -> Examples:
        """A fixed evaluation set: up to ``samples_per_length`` examples at each length."""

    def fingerprint(self) -> dict[str, Any]:
        """JSON-able identity of the data this task yields (its full config by default)."""
        return dict(self.config)

    @property
    def separator(self) -> str:
        """What joins tokens when written out: nothing if every symbol is one character."""
        return " " if any(len(s) > 1 for s in self.vocabulary.symbols) else ""

    def format_example(self, source_ids: Iterable[int], target_ids: Iterable[int]) -> str:
        """One line ``source -> target`` in the task's own symbols."""
        source = self.separator.join(self.vocabulary.decode(source_ids))
        target = self.separator.join(self.vocabulary.decode(target_ids))
        return f"{source} -> {target}"
