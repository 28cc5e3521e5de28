"""Batches for training and evaluation: length sampling, bucket padding, frozen eval sets, mesh.

A Batch is a dict of arrays (B examples, S source and T target positions, both padded up
to a length bucket so the number of compiled shapes is at most the number of buckets):

    source        int32 [B, S]  task tokens, padded with PAD_ID (0)
    source_mask   bool  [B, S]  True on real source tokens
    target_input  int32 [B, T]  BOS_ID (1) + target tokens (teacher forcing input)
    target_output int32 [B, T]  target tokens + EOS_ID (2)
    target_mask   bool  [B, T]  True on real target_output tokens, EOS included
    lengths       int32 [B]     task length n of each example (0 on batch-padding rows)
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import jax
import numpy as np
import pyarrow as pa
from jax.sharding import Mesh

from pe_research.atomic_files import atomic_write_text
from pe_research.errors import ConfigError, check_choice, check_divisible
from pe_research.mesh import batch_sharded, check_batch_fits
from pe_research.special_tokens import BOS_ID, EOS_ID
from pe_research.tasks.base import LENGTH_SAMPLING, Examples, Task, check_length_range, pad_columns
from pe_research.tasks.dataset_task import Ragged, quiet_datasets

Batch = dict[str, np.ndarray]
BATCH_KEYS = ("source", "source_mask", "target_input", "target_output", "target_mask", "lengths")
# Random streams: the plan of a global batch is shared by all processes, examples are not.
PLAN_STREAM, EXAMPLE_STREAM = 0x91A7, 0xE8A3
EVAL_FORMAT_VERSION = 1
SOURCE_KEYS, TARGET_KEYS = ("source", "source_mask"), ("target_input", "target_output",
                                                       "target_mask")


def bucket_length(n: int, buckets: Sequence[int]) -> int:
    """Smallest bucket >= ``n`` (0 for a task without a source); ConfigError naming
    ``data.buckets`` if none is that long."""
    if n == 0:
        return 0
    for bucket in sorted(int(b) for b in buckets):
        if bucket >= n:
            return bucket
    raise ConfigError("data.buckets", tuple(buckets),
                      f"no bucket holds {n} tokens; add one >= {n} (e.g. {_next_power_of_two(n)})")


def covering_buckets(buckets: Sequence[int], width: int) -> tuple[int, ...]:
    """``buckets``, plus the next power of two >= ``width`` when no bucket holds it."""
    widths = {int(b) for b in buckets}
    if max(widths, default=0) < width:
        widths.add(_next_power_of_two(width))
    return tuple(sorted(widths))


def make_batch(examples: Examples, source_width: int, target_width: int) -> Batch:
    """Examples -> Batch padded to ``[B, source_width]`` and ``[B, target_width]``."""
    count = len(examples)
    target_lengths = examples.target_lengths
    if target_width < int(target_lengths.max(initial=0)) + 1:
        raise ValueError(f"target width {target_width} leaves no room for EOS")
    target = pad_columns(examples.target, target_width)
    target_output = target.copy()
    target_output[np.arange(count), target_lengths] = EOS_ID
    target_input = np.concatenate([np.full((count, 1), BOS_ID, np.int32), target[:, :-1]], 1)
    return {
        "source": pad_columns(examples.source, source_width).astype(np.int32),
        "source_mask": np.arange(source_width) < examples.source_lengths[:, None],
        "target_input": target_input.astype(np.int32),
        "target_output": target_output.astype(np.int32),
        "target_mask": np.arange(target_width) < target_lengths[:, None] + 1,
        "lengths": examples.lengths.astype(np.int32),
    }


def check_data_block(data_cfg: Mapping[str, Any]) -> None:
    """The ``config.data`` checks that need no task: batch size, sampling, buckets, lengths."""
    batch_size = data_cfg["batch_size"]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError("data.batch_size", batch_size, "a positive integer")
    check_choice("data.length_sampling", data_cfg.get("length_sampling", "per_batch"),
                 LENGTH_SAMPLING)
    buckets = tuple(data_cfg["buckets"])
    if (not buckets or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in buckets)
            or list(buckets) != sorted(set(buckets))):
        raise ConfigError("data.buckets", buckets, "a non-empty, strictly increasing tuple of "
                          "positive lengths, e.g. (16, 32, 64)")
    if check_length_range(data_cfg["train_lengths"])[0] < 1:
        raise ConfigError("data.train_lengths", tuple(data_cfg["train_lengths"]),
                          "task lengths are positive integers")
    prefetch = data_cfg.get("prefetch", 0)
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        raise ConfigError("data.prefetch", prefetch, "how many batches to make ahead: an "
                          "integer >= 0 (0 turns prefetching off)")
    samples = data_cfg.get("eval_samples", 1)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ConfigError("data.eval_samples", samples, "a positive integer")


def check_data_config(task: Task, data_cfg: Mapping[str, Any],
                      eval_lengths: Sequence[int] = ()) -> None:
    """Every ``config.data`` check, those that need the task too; run before anything compiles."""
    check_data_block(data_cfg)
    low, high = check_length_range(data_cfg["train_lengths"])
    task.check_lengths((low, high), "data.train_lengths")
    if eval_lengths:
        task.check_lengths(eval_lengths, "eval lengths")
    longest = max([high, *eval_lengths])
    source, target = task.widest(range(low, longest + 1))
    bucket_length(source, data_cfg["buckets"])
    bucket_length(target + 1, data_cfg["buckets"])


def train_batch(task: Task, data_cfg: Mapping[str, Any], seed: int, step: int,
                process_index: int = 0, process_count: int = 1) -> Batch:
    """This process's slice of global training batch ``step``, fixed by the arguments.

    Lengths (or dataset rows) of the whole global batch come from a stream of
    ``(seed, step)`` that every process shares, so all processes agree on the padded
    shape; the tokens come from a stream of ``(seed, step, process_index)``.
    """
    global_size = int(data_cfg["batch_size"])
    check_divisible("data.batch_size", global_size, process_count, "process count")
    plan_rng = np.random.default_rng([seed, PLAN_STREAM, step])
    keys = task.draw_train_keys(plan_rng, global_size, data_cfg["train_lengths"],
                                data_cfg.get("length_sampling", "per_batch"))
    source_len, target_len = task.max_lengths(keys)
    buckets = tuple(data_cfg["buckets"])
    source_width = bucket_length(source_len, buckets)
    target_width = max(bucket_length(target_len + 1, buckets),
                       train_target_width(task, tuple(data_cfg["train_lengths"]), buckets,
                                          source_width))
    local_size = global_size // process_count
    local_keys = keys[process_index * local_size:(process_index + 1) * local_size]
    rng = np.random.default_rng([seed, EXAMPLE_STREAM, step, process_index])
    return make_batch(task.make_examples(local_keys, rng), source_width, target_width)


@functools.lru_cache(maxsize=64)
def train_target_width(task: Task, train_lengths: tuple[int, int], buckets: tuple[int, ...],
                       source_width: int) -> int:
    """The target width of training batches whose source bucket is ``source_width``: the widest
    target of any training length whose source fits it (one shape per source bucket)."""
    low, high = check_length_range(train_lengths)
    natural = {}
    for n in range(low, high + 1):
        source, target = task.train_widest([n])
        if source or target:  # a dataset task may hold no example of this length
            natural[n] = (bucket_length(source, buckets), bucket_length(target + 1, buckets))
    return max((t for s, t in natural.values() if s <= source_width), default=0)


def train_shapes(task: Task, data_cfg: Mapping[str, Any]) -> set[tuple[int, int]]:
    """Every (source width, target width) a training batch of ``data_cfg`` can be padded to."""
    lengths, buckets = tuple(data_cfg["train_lengths"]), tuple(data_cfg["buckets"])
    low, high = check_length_range(lengths)
    shapes = set()
    for n in range(low, high + 1):
        source, target = task.train_widest([n])
        if source or target:
            source_width = bucket_length(source, buckets)
            shapes.add((source_width,
                        max(bucket_length(target + 1, buckets),
                            train_target_width(task, lengths, buckets, source_width))))
    return shapes


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
    fingerprint = eval_fingerprint(task, lengths, samples_per_length, seed)
    return Path(cache_dir).expanduser() / f"eval_{task.name}_{fingerprint}.parquet"


def eval_dataset(task: Task, lengths: Sequence[int] | None, samples_per_length: int,
                 seed: int, cache_dir: str | Path) -> datasets.Dataset:
    """The fixed eval set (columns length, source, target), frozen to parquet on first use.

    The file name carries a fingerprint of (task config, lengths, samples, seed), so every
    scheme evaluated with the same arguments reads the identical examples. ``lengths=None``
    takes every length of a dataset task's eval split.
    """
    path = eval_set_path(task, lengths, samples_per_length, seed, cache_dir)
    if not path.exists():
        examples = task.eval_examples(lengths, samples_per_length, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")  # processes may race here
        with quiet_datasets():
            datasets.Dataset(_examples_table(examples)).to_parquet(str(partial))
        partial.replace(path)
        info = {"task": task.fingerprint(), "lengths": lengths,
                "samples_per_length": samples_per_length, "seed": seed}
        atomic_write_text(path.with_suffix(".json"), json.dumps(info, indent=1, default=str))
    with quiet_datasets():
        return datasets.Dataset.from_parquet(str(path), cache_dir=str(path.parent / ".datasets"))


def eval_lengths_of(dataset: datasets.Dataset) -> list[int]:
    """The task lengths present in an eval set, ascending."""
    return sorted({int(n) for n in np.asarray(dataset.with_format("arrow")["length"])})


def one_shape_per_source_bucket(
        widths: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Each entry's ``(source, target)`` bucket widths, the target widened to the widest target
    of any entry whose source is no wider: then the source bucket alone fixes the shape, and a
    range of lengths compiles at most once per bucket instead of once per bucket pair. Entries
    without a source (language modelling) keep their own target bucket, which alone fixes it."""
    return {key: (source, target if source == 0 else
                  max(t for s, t in widths.values() if 0 < s <= source))
            for key, (source, target) in widths.items()}


_COLUMNS: dict[str, tuple[np.ndarray, Ragged, Ragged]] = {}


def _columns(dataset: datasets.Dataset) -> tuple[np.ndarray, Ragged, Ragged]:
    """The eval set's lengths, sources and targets (read once per set, not once per length)."""
    fingerprint = dataset._fingerprint  # datasets' content hash of the set
    if fingerprint not in _COLUMNS:
        table = dataset.with_format("arrow")[:]
        if len(_COLUMNS) >= 4:
            _COLUMNS.pop(next(iter(_COLUMNS)))
        _COLUMNS[fingerprint] = (np.asarray(table.column("length")),
                                 *(Ragged.from_arrow(table.column(c))
                                   for c in ("source", "target")))
    return _COLUMNS[fingerprint]


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
                buckets: Sequence[int]) -> dict[int, tuple[int, int]]:
    """Padded ``(source, target)`` widths of each length's eval batches, one shape per source
    bucket (``one_shape_per_source_bucket``)."""
    natural = {}
    all_lengths, source, target = _columns(dataset)
    for length in lengths:
        rows = _rows_of(all_lengths, length, dataset)
        natural[int(length)] = (bucket_length(int(source.lengths[rows].max()), buckets),
                                bucket_length(int(target.lengths[rows].max()) + 1, buckets))
    return one_shape_per_source_bucket(natural)


def eval_batches(dataset: datasets.Dataset, length: int, batch_size: int, buckets: Sequence[int],
                 process_index: int = 0, process_count: int = 1,
                 widths: tuple[int, int] | None = None) -> Iterator[Batch]:
    """Batches of the examples of one length, padded to ``widths`` (default: ``eval_widths``
    of this length alone).

    Every batch has ``batch_size`` rows (this process's ``batch_size // process_count`` of
    them); the last is filled with rows whose masks are all False and whose length is 0.
    """
    all_lengths, source, target = _columns(dataset)
    rows = _rows_of(all_lengths, length, dataset)
    check_divisible("eval.batch_size", batch_size, process_count, "process count")
    source_width, target_width = widths or eval_widths(dataset, [length], buckets)[length]
    local = batch_size // process_count
    for start in range(0, rows.size, batch_size):
        chunk = rows[start:start + batch_size][process_index * local:(process_index + 1) * local]
        examples = Examples(source.padded(chunk, source_width), source.lengths[chunk],
                            target.padded(chunk, target_width), target.lengths[chunk],
                            np.full(chunk.size, length, np.int32))
        yield _pad_rows(make_batch(examples, source_width, target_width), local)


def pad_to(batch: dict[str, np.ndarray], source_width: int,
           target_width: int) -> dict[str, np.ndarray]:
    """A batch padded with masked columns to ``[B, source_width]`` / ``[B, target_width]``."""
    out = dict(batch)
    for keys, width in ((SOURCE_KEYS, source_width), (TARGET_KEYS, target_width)):
        for key in keys:
            extra = width - batch[key].shape[1]
            out[key] = np.pad(batch[key], ((0, 0), (0, extra))) if extra else batch[key]
    return out


def stack_batches(batches: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``[M, B, ...]``: every member's batch padded to the widest member's widths."""
    source = max(b["source"].shape[1] for b in batches)
    target = max(b["target_input"].shape[1] for b in batches)
    padded = [pad_to(b, source, target) for b in batches]
    return {key: np.stack([b[key] for b in padded]) for key in batches[0]}


def global_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Each key -> one ``jax.Array`` over all processes, batch axis sharded on mesh axis 'data'."""
    sharding = batch_sharded(mesh)
    rows = next(iter(local_batch.values())).shape[0] * jax.process_count()
    check_batch_fits("data.batch_size", rows, mesh)
    return {key: jax.make_array_from_process_local_data(sharding, np.asarray(value))
            for key, value in local_batch.items()}


def _examples_table(examples: Examples) -> pa.Table:
    def ragged(matrix: np.ndarray, lengths: np.ndarray) -> pa.ListArray:
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = matrix[np.arange(matrix.shape[1]) < lengths[:, None]].astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))

    return pa.table({"length": pa.array(examples.lengths.astype(np.int32)),
                     "source": ragged(examples.source, examples.source_lengths),
                     "target": ragged(examples.target, examples.target_lengths)})


def _pad_rows(batch: Batch, rows: int) -> Batch:
    extra = rows - batch["lengths"].shape[0]
    if extra == 0:
        return batch
    return {k: np.concatenate([v, np.zeros((extra, *v.shape[1:]), v.dtype)])
            for k, v in batch.items()}


def _next_power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()
