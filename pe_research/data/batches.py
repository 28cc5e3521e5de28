"""Training batches: length sampling, bucket padding, and the checks of ``config.data``.

A Batch is a dict of arrays (B examples, S source positions padded up to a length bucket, T
target positions to the longest target of any length that bucket holds, rounded up to a
multiple of ``WIDTH_MULTIPLE``, or to its own bucket for a task without a source; so the number
of compiled shapes is at most the number of buckets):

    source        int32 [B, S]  task tokens, padded with PAD_ID (0)
    source_mask   bool  [B, S]  True on real source tokens
    target_input  int32 [B, T]  BOS_ID (1) + target tokens (teacher forcing input)
    target_output int32 [B, T]  target tokens + EOS_ID (2)
    target_mask   bool  [B, T]  True on real target_output tokens, EOS included
    lengths       int32 [B]     task length n of each example (0 on batch-padding rows)
    joint_mask    bool  [B, W]  True on each row's source then target tokens packed together: the
                                single-stack models' joint sequence (``model/single_stack.py``),
                                W its width (``joint_width``), at most S + T

and, for a task that supplies position IDs (``Task.position_kinds``), per kind K:

    source_K      int32 [B, S]  the source tokens' IDs of kind K, 0 on padding
    target_K      int32 [B, T]  the IDs of target_input's slots (BOS, then the target tokens)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pe_research.core.errors import ConfigError, check_choice, check_divisible
from pe_research.tasks.base import LENGTH_SAMPLING, Examples, Task, check_length_range
from pe_research.tasks.vocabulary import BOS_ID, EOS_ID, PAD_ID

Batch = dict[str, np.ndarray]
BATCH_KEYS = ("source", "source_mask", "target_input", "target_output", "target_mask", "lengths",
              "joint_mask")
# A width that follows from the source bucket (the target's, the joint sequence's) is its
# longest row rounded up to this, not a bucket: the source bucket alone fixes the shape.
WIDTH_MULTIPLE = 8
# Random streams: the plan of a global batch is shared by all processes, examples are not.
PLAN_STREAM, EXAMPLE_STREAM = 0x91A7, 0xE8A3
LENGTH_STREAMS = ("seed", "shared")


def stream_generator(*words: int) -> np.random.Generator:
    """``np.random.default_rng([*words])``: the same stream. Words that fit 32 bits go in as
    a uint32 array, which numpy's seeding reads as it is instead of converting each int (a
    program builds two generators per member at every step)."""
    if all(0 <= word < 1 << 32 for word in words):
        return np.random.default_rng(np.array(words, np.uint32))
    return np.random.default_rng(list(words))

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

def round_up(n: int) -> int:
    """``n`` rounded up to a multiple of ``WIDTH_MULTIPLE``."""
    return -(-int(n) // WIDTH_MULTIPLE) * WIDTH_MULTIPLE

def joint_width(longest: int, source_width: int, target_width: int) -> int:
    """The width of a batch's packed joint sequence whose longest row has ``longest`` tokens
    (source, then target with EOS): that, rounded up, and at most ``source_width +
    target_width``."""
    return min(round_up(longest), source_width + target_width)

def bucket_shape(source_width: int, longest_target: int, longest: int,
                 buckets: Sequence[int]) -> tuple[int, int, int]:
    """The (source, target, joint) widths of batches of source bucket ``source_width`` whose
    longest target is ``longest_target`` tokens (EOS included) and longest joint row
    ``longest``: the target rounded up (without a source, where it alone fixes the shape, to
    its bucket), and the joint width."""
    target = round_up(longest_target) if source_width else bucket_length(longest_target,
                                                                          buckets)
    return source_width, target, joint_width(longest, source_width, target)

def make_batch(examples: Examples, source_width: int, target_width: int,
               joint: int | None = None) -> Batch:
    """Examples -> Batch padded to ``[B, source_width]``, ``[B, target_width]`` and a joint
    width of ``joint`` (default: the two added)."""
    return {key: value[0] for key, value in
            make_batches([examples], source_width, target_width, joint).items()}

def make_batches(members: Sequence[Examples], source_width: int, target_width: int,
                 joint: int | None = None) -> Batch:
    """``[M, B, ...]``: each member's Examples as a Batch padded to ``[B, source_width]``,
    ``[B, target_width]`` and ``[B, joint]`` (default ``source_width + target_width``);
    position IDs of a kind a member's task does not supply are zeros."""
    count, rows = len(members), len(members[0])
    if any(len(examples) != rows for examples in members):
        raise ValueError(f"members of {sorted({len(e) for e in members})} examples; stack "
                         "batches of one size")
    target_lengths = np.array([examples.target_lengths for examples in members])
    if target_width < int(target_lengths.max(initial=0)) + 1:
        raise ValueError(f"target width {target_width} leaves no room for EOS")
    widths = {"source": source_width, "target": target_width}
    kinds = dict.fromkeys(kind for examples in members for kind in examples.positions)
    padded = {key: np.full((count, rows, widths[key.split("_")[0]]),
                           PAD_ID if key in widths else 0, np.int32)
              for key in (*widths, *(f"{side}_{kind}" for kind in kinds for side in widths))}
    for k, examples in enumerate(members):
        columns = {"source": examples.source, "target": examples.target,
                   **{f"{side}_{kind}": ids for kind, pair in examples.positions.items()
                      for side, ids in zip(widths, pair, strict=True)}}
        for key, value in columns.items():
            if value.shape[1] > padded[key].shape[2]:
                raise ValueError(f"{key}: cannot pad width {value.shape[1]} down to "
                                 f"{padded[key].shape[2]}")
            padded[key][k, :, :value.shape[1]] = value
    target_output = padded.pop("target")
    target_input = np.empty_like(target_output)
    target_input[..., 0] = BOS_ID
    target_input[..., 1:] = target_output[..., :-1]
    target_output.reshape(count * rows, target_width)[np.arange(count * rows),
                                                      target_lengths.ravel()] = EOS_ID
    source_lengths = np.array([examples.source_lengths for examples in members])
    joint = source_width + target_width if joint is None else joint
    joint_lengths = source_lengths + target_lengths + 1
    if joint < int(joint_lengths.max(initial=0)):
        raise ValueError(f"joint width {joint} is narrower than a row's "
                         f"{int(joint_lengths.max())} tokens")
    return {
        "source": padded.pop("source"),
        "source_mask": np.arange(source_width) < source_lengths[..., None],
        "target_input": target_input,
        "target_output": target_output,
        "target_mask": np.arange(target_width) < target_lengths[..., None] + 1,
        "lengths": np.array([examples.lengths for examples in members], np.int32),
        "joint_mask": np.arange(joint) < joint_lengths[..., None],
        **padded,
    }

def check_data_block(data_cfg: Mapping[str, Any]) -> None:
    """The ``config.data`` checks that need no task: batch size, sampling, buckets, lengths."""
    batch_size = data_cfg["batch_size"]
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError("data.batch_size", batch_size, "a positive integer")
    check_choice("data.length_sampling", data_cfg.get("length_sampling", "per_batch"),
                 LENGTH_SAMPLING)
    check_choice("data.length_stream", data_cfg.get("length_stream", "seed"), LENGTH_STREAMS)
    buckets = tuple(data_cfg["buckets"])
    if (not buckets or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in buckets)
            or list(buckets) != sorted(set(buckets))):
        raise ConfigError("data.buckets", buckets, "a non-empty, strictly increasing tuple of "
                          "positive lengths, e.g. (16, 32, 64)")
    if check_length_range(data_cfg["train_lengths"])[0] < 1:
        raise ConfigError("data.train_lengths", tuple(data_cfg["train_lengths"]),
                          "task lengths are positive integers")
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
    if not bucket_length(source, data_cfg["buckets"]):  # else the source bucket sets the shape
        bucket_length(target + 1, data_cfg["buckets"])

def train_batch(task: Task, data_cfg: Mapping[str, Any], seed: int, step: int,
                process_index: int = 0, process_count: int = 1) -> Batch:
    """This process's slice of global training batch ``step``, fixed by the arguments.

    Lengths (or dataset rows) of the whole global batch come from a stream of
    ``(seed, step)`` that every process shares, so all processes agree on the padded
    shape (``data.length_stream = shared``: of ``step`` alone, the same for every run, so
    the members of a program share it too); the tokens come from a stream of
    ``(seed, step, process_index)``.
    """
    examples, widths = train_examples(task, data_cfg, seed, step, process_index, process_count)
    return make_batch(examples, *widths)

def train_examples(task: Task, data_cfg: Mapping[str, Any], seed: int, step: int,
                   process_index: int = 0, process_count: int = 1,
                   ) -> tuple[Examples, tuple[int, int, int]]:
    """(this process's examples of training batch ``step``, the (source, target, joint)
    widths ``train_batch`` pads them to)."""
    global_size = int(data_cfg["batch_size"])
    check_divisible("data.batch_size", global_size, process_count, "process count")
    keys, widths = _batch_plan(task, data_cfg, seed, step)
    local_size = global_size // process_count
    local_keys = keys[process_index * local_size:(process_index + 1) * local_size]
    rng = stream_generator(seed, EXAMPLE_STREAM, step, process_index)
    return task.make_examples(local_keys, rng), widths

def train_widths(task: Task, data_cfg: Mapping[str, Any], seed: int,
                 step: int) -> tuple[int, int, int]:
    """(source, target, joint) widths of training batch ``step``, drawing no example: the
    shape ``train_batch`` pads it to."""
    return _batch_plan(task, data_cfg, seed, step)[1]

def _batch_plan(task: Task, data_cfg: Mapping[str, Any], seed: int,
                step: int) -> tuple[Any, tuple[int, int, int]]:
    """(the global batch's example keys, its (source, target, joint) widths) of ``step``."""
    shared = data_cfg.get("length_stream", "seed") == "shared"
    plan_rng = (stream_generator(PLAN_STREAM, step) if shared
                else stream_generator(seed, PLAN_STREAM, step))
    keys = task.draw_train_keys(plan_rng, int(data_cfg["batch_size"]), data_cfg["train_lengths"],
                                data_cfg.get("length_sampling", "per_batch"))
    return keys, train_shape(task, data_cfg, *task.max_lengths(keys))

def train_shape(task: Task, data_cfg: Mapping[str, Any], source: int,
                target: int) -> tuple[int, int, int]:
    """The (source, target, joint) widths of a training batch whose widest row has ``source``
    and ``target`` tokens (target without EOS): its source bucket's shape, one per bucket."""
    lengths, buckets = tuple(data_cfg["train_lengths"]), tuple(data_cfg["buckets"])
    source_width = bucket_length(source, buckets)
    longest_target, longest = train_bucket_shape(task, lengths, buckets, source_width)
    return bucket_shape(source_width, max(longest_target, target + 1),
                        max(longest, source + target + 1), buckets)

@functools.lru_cache(maxsize=4096)  # an ensemble asks it for each member's task at each step
def train_bucket_shape(task: Task, train_lengths: tuple[int, int], buckets: tuple[int, ...],
                       source_width: int) -> tuple[int, int]:
    """(the most target tokens, the most source plus target tokens; EOS included) of any
    training length whose source fits the source bucket ``source_width``: what its batches'
    shape holds (``bucket_shape``; one shape per source bucket)."""
    low, high = check_length_range(train_lengths)
    fitting = []
    for n in range(low, high + 1):
        source, target = task.train_widest([n])
        if (source or target) and bucket_length(source, buckets) <= source_width:
            # a dataset task may hold no example of this length
            fitting.append((target + 1, source + target + 1))
    return (max((t for t, _ in fitting), default=0), max((j for _, j in fitting), default=0))

def train_shapes(task: Task, data_cfg: Mapping[str, Any]) -> set[tuple[int, int, int]]:
    """Every (source, target, joint) width a training batch of ``data_cfg`` can be padded to."""
    low, high = check_length_range(data_cfg["train_lengths"])
    widest = [task.train_widest([n]) for n in range(low, high + 1)]
    # a dataset task may hold no example of a length
    return {train_shape(task, data_cfg, source, target) for source, target in widest
            if source or target}

def _next_power_of_two(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()
