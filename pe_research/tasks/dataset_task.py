"""Base of tasks backed by a fixed set of examples (SCAN, user seq2seq datasets).

Text goes through Hugging Face ``datasets`` twice: strings -> token lists, then token
lists -> ids with the vocabulary of the training split; both ``map`` calls are cached by
``datasets`` under their fingerprints, so a second run tokenises nothing. The ids then live
in memory as flat arrays with offsets, and a batch is a fancy-indexing gather.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import datasets
import numpy as np
import pyarrow as pa

from pe_research.core.errors import ConfigError
from pe_research.tasks.base import LENGTH_SAMPLING, Examples, Task, check_length_range
from pe_research.tasks.vocabulary import PAD_ID, Vocabulary

LENGTH_OF = ("target", "source")


@dataclasses.dataclass(frozen=True)
class Ragged:
    """Rows of different lengths: row i is ``values[offsets[i]:offsets[i+1]]``."""

    values: np.ndarray  # int32 [total]
    offsets: np.ndarray  # int64 [rows + 1]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets).astype(np.int32)

    @classmethod
    def from_arrow(cls, column: pa.ChunkedArray | pa.Array) -> Ragged:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        offsets = np.asarray(column.offsets, dtype=np.int64)
        return cls(column.flatten().to_numpy().astype(np.int32), offsets - offsets[0])

    def padded(self, rows: np.ndarray, width: int | None = None) -> np.ndarray:
        """Rows ``rows`` as a matrix ``[len(rows), width]`` padded with PAD_ID."""
        starts, lengths = self.offsets[rows], self.lengths[rows]
        width = int(lengths.max(initial=0)) if width is None else width
        columns = np.arange(width)
        real = columns < lengths[:, None]
        index = np.where(real, starts[:, None] + columns, 0)
        values = self.values[index] if self.values.size else np.zeros_like(index)
        return np.where(real, values, PAD_ID).astype(np.int32)

    def digest(self) -> str:
        return hashlib.sha256(self.values.tobytes() + self.offsets.tobytes()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Split:
    """One split as ids: ``source`` and ``target`` rows and the task length of each row."""

    source: Ragged
    target: Ragged
    lengths: np.ndarray  # int32 [rows]

    def examples(self, rows: np.ndarray) -> Examples:
        return Examples(source=self.source.padded(rows),
                        source_lengths=self.source.lengths[rows],
                        target=self.target.padded(rows),
                        target_lengths=self.target.lengths[rows],
                        lengths=self.lengths[rows])


def check_columns(dataset: datasets.Dataset, columns: Mapping[str, str], where: str) -> None:
    """ConfigError naming the columns that exist when a configured column is missing."""
    for key, column in columns.items():
        if column not in dataset.column_names:
            raise ConfigError(key, column,
                              f"{where} has no such column; its columns are {dataset.column_names}")


def build_vocabulary(tokens: datasets.Dataset, *, unknown: bool = True) -> Vocabulary:
    """Word table of a tokenised training split: every source and target token, sorted."""
    words: set[str] = set()
    for column in ("source_tokens", "target_tokens"):
        for row in tokens.with_format("arrow")[column].to_pylist():
            words.update(row)
    return Vocabulary(sorted(words), unknown=unknown)


def encode_split(tokens: datasets.Dataset, vocabulary: Vocabulary, length_of: str) -> Split:
    """Token lists -> ids (a cached ``datasets.map``) -> in-memory ``Split``."""
    ids = tokens.map(_encode_batch, batched=True, remove_columns=tokens.column_names,
                     fn_kwargs={"table": dict(zip(vocabulary.tokens, range(vocabulary.size),
                                                  strict=True)),
                                "unk_id": vocabulary.unk_id},
                     features=datasets.Features({
                         "source_ids": datasets.List(datasets.Value("int32")),
                         "target_ids": datasets.List(datasets.Value("int32"))}))
    table = ids.with_format("arrow")[:]
    source = Ragged.from_arrow(table.column("source_ids"))
    target = Ragged.from_arrow(table.column("target_ids"))
    lengths = (source if length_of == "source" else target).lengths
    return Split(source, target, lengths)


def _encode_batch(batch: dict, table: dict[str, int], unk_id: int | None) -> dict:
    def encode(row: list[str]) -> list[int]:
        if unk_id is None:
            return [table[t] for t in row]
        return [table.get(t, unk_id) for t in row]
    return {"source_ids": [encode(r) for r in batch["source_tokens"]],
            "target_ids": [encode(r) for r in batch["target_tokens"]]}


class DatasetTask(Task):
    """A task whose train and eval examples are the rows of two tokenised splits."""

    family = "text"
    train: Split
    evaluation: Split

    def setup(self, train: Split, evaluation: Split, vocabulary: Vocabulary) -> None:
        self.train, self.evaluation, self.vocabulary = train, evaluation, vocabulary
        self._eligible: dict[tuple[int, int], np.ndarray] = {}

    def available_lengths(self, split: str = "eval") -> list[int]:
        """Task lengths present in a split ('train' or 'eval'), ascending."""
        data = self.train if split == "train" else self.evaluation
        return [int(n) for n in np.unique(data.lengths)]

    def widest(self, lengths: Iterable[int]) -> tuple[int, int]:
        return self._widest(lengths, (self.train, self.evaluation))

    def train_widest(self, lengths: Iterable[int]) -> tuple[int, int]:
        return self._widest(lengths, (self.train,))

    @staticmethod
    def _widest(lengths: Iterable[int], splits) -> tuple[int, int]:
        wanted = np.asarray(sorted(int(n) for n in lengths))
        widths = [0, 0]
        for split in splits:
            rows = np.isin(split.lengths, wanted)
            widths[0] = max(widths[0], int(split.source.lengths[rows].max(initial=0)))
            widths[1] = max(widths[1], int(split.target.lengths[rows].max(initial=0)))
        return widths[0], widths[1]

    def max_lengths(self, keys: np.ndarray) -> tuple[int, int]:
        return (int(self.train.source.lengths[keys].max(initial=0)),
                int(self.train.target.lengths[keys].max(initial=0)))

    def draw_train_keys(self, rng: np.random.Generator, count: int,
                        train_lengths: Sequence[int], length_sampling: str) -> np.ndarray:
        rows = self._rows_in_range(check_length_range(train_lengths))
        if length_sampling == "mixed":
            return rows[rng.integers(0, rows.size, size=count)]
        if length_sampling == "per_batch":
            lengths = self.train.lengths[rows]
            n = rng.choice(np.unique(lengths))
            same = rows[lengths == n]
            return same[rng.integers(0, same.size, size=count)]
        raise ConfigError("data.length_sampling", length_sampling,
                          f"choose one of {LENGTH_SAMPLING}")

    def make_examples(self, keys: np.ndarray, rng: np.random.Generator) -> Examples:
        return self.train.examples(np.asarray(keys, dtype=np.int64))

    def eval_examples(self, lengths: Sequence[int] | None, samples_per_length: int,
                      seed: int) -> Examples:
        available = self.available_lengths()
        wanted = available if lengths is None else [int(n) for n in lengths]
        present = [n for n in wanted if n in available]
        if not present:
            raise ConfigError("eval.lengths", tuple(wanted),
                              f"the {self.name} eval split has lengths {available}")
        groups = []
        for n in present:
            rows = np.flatnonzero(self.evaluation.lengths == n)
            if samples_per_length and rows.size > samples_per_length:
                chosen = np.random.default_rng([seed, n]).choice(rows.size, samples_per_length,
                                                                 replace=False)
                rows = rows[np.sort(chosen)]
            groups.append(self.evaluation.examples(rows))
        return Examples.concatenate(groups)

    def fingerprint(self) -> dict[str, Any]:
        config = {k: v for k, v in self.config.items() if k != "cache_dir"}
        return {**config, "vocabulary": list(self.vocabulary.tokens),
                "train": self.train.source.digest() + self.train.target.digest(),
                "eval": self.evaluation.source.digest() + self.evaluation.target.digest()}

    def _rows_in_range(self, bounds: tuple[int, int]) -> np.ndarray:
        if bounds not in self._eligible:
            low, high = bounds
            rows = np.flatnonzero((self.train.lengths >= low) & (self.train.lengths <= high))
            if rows.size == 0:
                raise ConfigError("data.train_lengths", bounds,
                                  f"no {self.name} training example has a length in it; "
                                  f"lengths present: {self.available_lengths('train')}")
            self._eligible[bounds] = rows
        return self._eligible[bounds]


def tokenize(dataset: datasets.Dataset, split_text: Callable[[Any], list[str]],
             source_column: str, target_column: str) -> datasets.Dataset:
    """Raw text columns -> ``source_tokens`` / ``target_tokens`` lists (a cached map)."""
    return dataset.map(_tokenize_batch, batched=True, remove_columns=dataset.column_names,
                       fn_kwargs={"split_text": split_text, "source_column": source_column,
                                  "target_column": target_column})


def _tokenize_batch(batch: dict, split_text: Callable[[Any], list[str]], source_column: str,
                    target_column: str) -> dict:
    return {"source_tokens": [split_text(x) for x in batch[source_column]],
            "target_tokens": [split_text(x) for x in batch[target_column]]}


@contextlib.contextmanager
def quiet_datasets() -> Iterator[None]:
    """Silence the progress bars of ``datasets`` for the duration, then restore them."""
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()
