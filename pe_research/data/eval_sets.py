"""Frozen evaluation sets: the same examples for every scheme, stored once as parquet, read
back as batches of one length padded to one shape per source bucket."""

from __future__ import annotations

import hashlib
import json
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa

from pe_research.core.atomic_files import atomic_write_text
from pe_research.core.errors import ConfigError, check_divisible
from pe_research.data.batches import Batch, bucket_length, bucket_shape, make_batch
from pe_research.tasks.base import Examples, Task
from pe_research.tasks.dataset_task import Ragged, quiet_datasets

EVAL_FORMAT_VERSION = 1


def eval_fingerprint(task: Task, lengths: Sequence[int] | None, samples_per_length: int,
                     seed: int) -> str:
    """Hash of everything that decides an eval set's examples."""
    payload = {"task": task.fingerprint(), "lengths": None if lengths is None else
               [int(n) for n in lengths], "samples_per_length": int(samples_per_length),
               "seed": int(seed), "format": EVAL_FORMAT_VERSION}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]

def eval_set_path(task: Task, lengths: Sequence[int] | None, samples_per_length: int,
                  seed: int, cache_dir: str | Path) -> Path:
    """Where ``eval_dataset`` keeps the frozen set of these arguments."""
    return _set_path(task, eval_fingerprint(task, lengths, samples_per_length, seed), cache_dir)

def _set_path(task: Task, fingerprint: str, cache_dir: str | Path) -> Path:
    return Path(cache_dir).expanduser() / f"eval_{task.name}_{fingerprint}.parquet"

def eval_dataset(task: Task, lengths: Sequence[int] | None, samples_per_length: int,
                 seed: int, cache_dir: str | Path) -> datasets.Dataset:
    """The fixed eval set (columns length, source, target), frozen to parquet on first use.

    The file name carries a fingerprint of (task config, lengths, samples, seed), so every
    scheme evaluated with the same arguments reads the identical examples. ``lengths=None``
    takes every length of a dataset task's eval split.
    """
    fingerprint = eval_fingerprint(task, lengths, samples_per_length, seed)
    path = _set_path(task, fingerprint, cache_dir)
    if not path.exists():
        examples = task.eval_examples(lengths, samples_per_length, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")  # processes may race here
        with quiet_datasets():  # our fingerprint: datasets' own would hash every row
            datasets.Dataset(_examples_table(examples), fingerprint=fingerprint).to_parquet(
                str(partial))
        partial.replace(path)
        info = {"task": task.fingerprint(), "lengths": lengths,
                "samples_per_length": samples_per_length, "seed": seed}
        atomic_write_text(path.with_suffix(".json"), json.dumps(info, indent=1, default=str))
    with quiet_datasets():
        return datasets.Dataset.from_parquet(str(path), cache_dir=str(path.parent / ".datasets"))

def eval_lengths_of(dataset: datasets.Dataset) -> list[int]:
    """The task lengths present in an eval set, ascending."""
    return sorted({int(n) for n in np.asarray(dataset.with_format("arrow")["length"])})

def one_shape_per_source_bucket(widths: Mapping[int, tuple[int, int, int]],
                                buckets: Sequence[int]) -> dict[int, tuple[int, int, int]]:
    """Each entry's source bucket, its longest target and its longest joint sequence (source
    plus target tokens; EOS included) -> ``(source, target, joint)`` widths
    (``batches.bucket_shape``) that hold every entry whose source is no wider. Then the source
    bucket alone fixes the shape, and a range of lengths compiles at most once per bucket
    instead of once per bucket pair. Entries without a source (language modelling) keep their
    own, their target bucketed, which alone fixes it."""
    shapes = {}
    for key, (source, target, longest) in widths.items():
        if source:
            fitting = [(t, j) for s, t, j in widths.values() if 0 < s <= source]
            target, longest = max(t for t, _ in fitting), max(j for _, j in fitting)
        shapes[key] = bucket_shape(source, target, longest, buckets)
    return shapes

Columns = tuple[np.ndarray, Ragged, Ragged, dict[str, tuple[Ragged, Ragged]]]
# Each open set's columns, kept as long as its Dataset object: a program evaluating M members
# reads M sets at every length, and a cache of fewer sets than that reread each from Arrow.
_COLUMNS: weakref.WeakKeyDictionary[datasets.Dataset, Columns] = weakref.WeakKeyDictionary()

def _columns(dataset: datasets.Dataset) -> tuple[np.ndarray, Ragged, Ragged]:
    """The eval set's lengths, sources and targets (read once per set, not once per length)."""
    return _read(dataset)[:3]

def _position_columns(dataset: datasets.Dataset) -> dict[str, tuple[Ragged, Ragged]]:
    """kind -> the stored source and target position IDs (``Examples.positions``)."""
    return _read(dataset)[3]

def _read(dataset: datasets.Dataset) -> Columns:
    """Lengths, sources, targets and position IDs of the set, read once per Dataset object."""
    if dataset not in _COLUMNS:
        table = dataset.with_format("arrow")[:]
        kinds = [name[len("source_"):] for name in table.column_names
                 if name.startswith("source_")]
        _COLUMNS[dataset] = (
            np.asarray(table.column("length")),
            *(Ragged.from_arrow(table.column(c)) for c in ("source", "target")),
            {kind: (Ragged.from_arrow(table.column(f"source_{kind}")),
                    Ragged.from_arrow(table.column(f"target_{kind}"))) for kind in kinds})
    return _COLUMNS[dataset]

def _rows_of(lengths: np.ndarray, length: int, dataset: datasets.Dataset) -> np.ndarray:
    rows = np.flatnonzero(lengths == length)
    if rows.size == 0:
        raise ConfigError("eval length", length,
                          f"the eval set has lengths {eval_lengths_of(dataset)}")
    return rows

def eval_batch_rows(dataset: datasets.Dataset, lengths: Sequence[int], batch_size: int,
                    multiple: int) -> int:
    """``batch_size``, or fewer: the most examples of any of ``lengths`` up to a multiple of
    ``multiple`` (no rows of padding alone); one count for all, one shape per bucket."""
    all_lengths = _columns(dataset)[0]
    most = max(_rows_of(all_lengths, length, dataset).size for length in lengths)
    return min(batch_size, -(-most // multiple) * multiple)

def eval_widths(dataset: datasets.Dataset, lengths: Sequence[int],
                buckets: Sequence[int]) -> dict[int, tuple[int, int, int]]:
    """Padded ``(source, target, joint)`` widths of each length's eval batches, one shape per
    source bucket (``one_shape_per_source_bucket``)."""
    natural = {}
    all_lengths, source, target = _columns(dataset)
    for length in lengths:
        rows = _rows_of(all_lengths, length, dataset)
        natural[int(length)] = (
            bucket_length(int(source.lengths[rows].max()), buckets),
            int(target.lengths[rows].max()) + 1,
            int((source.lengths[rows] + target.lengths[rows]).max()) + 1)
    return one_shape_per_source_bucket(natural, buckets)

def eval_batches(dataset: datasets.Dataset, length: int, batch_size: int, buckets: Sequence[int],
                 process_index: int = 0, process_count: int = 1,
                 widths: tuple[int, int, int] | None = None) -> Iterator[Batch]:
    """Batches of the examples of one length, padded to ``widths`` (default: ``eval_widths``
    of this length alone).

    Every batch has ``batch_size`` rows (this process's ``batch_size // process_count`` of
    them); the last is filled with rows whose masks are all False and whose length is 0.
    """
    all_lengths, source, target = _columns(dataset)
    rows = _rows_of(all_lengths, length, dataset)
    check_divisible("eval.batch_size", batch_size, process_count, "process count")
    source_width, target_width, joint = widths or eval_widths(dataset, [length], buckets)[length]
    local = batch_size // process_count
    for start in range(0, rows.size, batch_size):
        chunk = rows[start:start + batch_size][process_index * local:(process_index + 1) * local]
        positions = {kind: (ids[0].padded(chunk, source_width), ids[1].padded(chunk, target_width))
                     for kind, ids in _position_columns(dataset).items()}
        examples = Examples(source.padded(chunk, source_width), source.lengths[chunk],
                            target.padded(chunk, target_width), target.lengths[chunk],
                            np.full(chunk.size, length, np.int32), positions)
        yield _pad_rows(make_batch(examples, source_width, target_width, joint), local)

def _examples_table(examples: Examples) -> pa.Table:
    def ragged(matrix: np.ndarray, lengths: np.ndarray) -> pa.ListArray:
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = matrix[np.arange(matrix.shape[1]) < lengths[:, None]].astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))

    positions = {}
    for kind, (source_ids, target_ids) in examples.positions.items():
        positions[f"source_{kind}"] = ragged(source_ids, examples.source_lengths)
        positions[f"target_{kind}"] = ragged(target_ids, examples.target_lengths + 1)
    return pa.table({"length": pa.array(examples.lengths.astype(np.int32)),
                     "source": ragged(examples.source, examples.source_lengths),
                     "target": ragged(examples.target, examples.target_lengths), **positions})

def _pad_rows(batch: Batch, rows: int) -> Batch:
    extra = rows - batch["lengths"].shape[0]
    if extra == 0:
        return batch
    return {k: np.concatenate([v, np.zeros((extra, *v.shape[1:]), v.dtype)])
            for k, v in batch.items()}
