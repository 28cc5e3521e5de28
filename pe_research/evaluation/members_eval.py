"""Range evaluation of several runs in one program, vmapped over them (a sweep's report).

Runs that share the model but for the task's vocabulary and their randomized ranges
(``members_key``) are scored together: parameters stacked, the model padded to the widest vocabulary
(``model/padded_vocab.py``), each run on the positions of its own range, every member's batch padded
to the widest member's widths, so the statistics compile once per batch shape for all of them;
member k's rows equal ``range_eval.evaluate_run(runs[k])``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx
from tqdm import tqdm

from pe_research import data
from pe_research.config.stacking import first_difference, program_key, randomized_range
from pe_research.evaluation.batch_statistics import (
    decodes_at_oracle_length,
    example_statistics,
    task_decodes,
)
from pe_research.evaluation.range_eval import (
    PROGRESS_DELAY_S,
    EvalResult,
    LengthResult,
    RangeEvaluator,
    default_lengths,
    summarize_length,
)
from pe_research.model.attention import set_query_block
from pe_research.model.inputs import eval_position_key
from pe_research.model.member_settings import members_model_settings, set_member_settings
from pe_research.model.padded_vocab import pad_to, widest
from pe_research.runs.restore import LoadedRun
from pe_research.runs.run_dir import RunDir
from pe_research.runtime import batch_multiple


def members_key(config: ml_collections.ConfigDict,
                lengths: Sequence[int] | None = None) -> str:
    """What runs evaluated in one program (``evaluate_members``) share, as text: every setting but
    those members of a training program may differ in (``config/stacking.py``: seed, optimizer
    scalars, dropout, wavelength base, RoPE and logit scaling, task, randomized range, end-token
    scoring), and whether the
    task decodes, whether it is also decoded at the oracle length (as -EOS runs are) and the eval
    lengths (``lengths``, else the config's), which those settings would leave free."""
    nested = config.to_dict()
    return json.dumps([program_key(nested), task_decodes(config), decodes_at_oracle_length(config),
                       [int(n) for n in lengths or default_lengths(config)]])


def check_evaluated_together(runs: Sequence[LoadedRun],
                             lengths: Sequence[int] | None = None) -> None:
    """ValueError naming the first run that cannot be evaluated in one program with the first
    (``members_key``) at ``lengths`` (default: each run's own)."""
    first = members_key(runs[0].config, lengths)
    for run in runs[1:]:
        if members_key(run.config, lengths) != first:
            difference = first_difference(runs[0].config.to_dict(), run.config.to_dict()) or \
                "decoding (free or at the oracle length) or eval lengths"
            raise ValueError(f"{run.run_dir} cannot be evaluated in one program with "
                             f"{runs[0].run_dir}: they differ in {difference}; evaluate them "
                             "apart")


def evaluate_members(runs: Sequence[LoadedRun], lengths: Sequence[int] | None = None,
                     buckets: Sequence[int] | None = None) -> list[EvalResult]:
    """Range evaluation of several runs in one program, vmapped over members.

    The members share the model but for its vocabulary (``members_key``): they may differ in seed,
    optimizer scalars (learning rate, ...), dropout rate, wavelength base, RoPE and logit scaling,
    task and randomized range. Member k is scored on its own frozen eval set (its task's and
    seed's) with its own position key, randomized range and model settings, in the model padded to
    the widest member's
    vocabulary and over its own tokens (``model/padded_vocab.py``), so its rows equal
    ``evaluate_run(runs[k])``. Batches are padded to the widest member's widths, so the function
    compiles once per batch shape for all members (a member with fewer batches at a length gets
    batches of padding rows, which count nothing); a batch whose estimate exceeds the members' share
    of ``eval.memory_budget_gb`` is split as in ``RangeEvaluator``.
    """
    check_evaluated_together(runs, lengths)
    sizes = [run.task.vocabulary.size for run in runs]
    wide = runs[widest(sizes)]
    first = wide.config
    lengths = tuple(int(n) for n in (lengths or default_lengths(first)))
    buckets = tuple(buckets or first.data.buckets)
    for run in runs:
        run.task.check_lengths(lengths, "--lengths")
    datasets = [data.eval_dataset(run.task, lengths, run.config.data.eval_samples,
                                  run.config.seed, str(RunDir(run.run_dir).eval_data(
                                      run.config.data))) for run in runs]
    planner = RangeEvaluator(first, wide.graphdef, wide.rest, wide.mesh)
    plans = [planner.plan(dataset, lengths, first.eval.batch_size, buckets)
             for dataset in datasets]
    batch_size = max(data.eval_batch_rows(dataset, lengths, first.eval.batch_size,
                                          batch_multiple(wide.mesh)) for dataset in datasets)
    compiled_shapes: list[tuple[int, int, int]] = []
    graphdef, rest = wide.graphdef, wide.rest
    oracle_length, decode = decodes_at_oracle_length(first), task_decodes(first)

    # Members of other randomized ranges than the program model's draw theirs too.
    member_ranges = [randomized_range(run.config.to_dict()) for run in runs]
    ranges = sorted(set(member_ranges))

    def statistics(params, batch, position_key, first_row, vocab_size, settings, own_range):
        compiled_shapes.append((*batch["source"].shape[1:], batch["target_input"].shape[2]))
        return jax.vmap(lambda p, b, k, v, s, r: example_statistics(
            set_member_settings(set_query_block(nnx.merge(graphdef, p, rest),
                                                first.eval.query_block), s), b, k,
            oracle_length, first_row, decode, v, ranges, r),
            in_axes=(0, 0, 0, *[None if own is None else 0
                                for own in (vocab_size, settings, own_range)]))(
                params, batch, position_key, vocab_size, settings, own_range)

    stacked_statistics = jax.jit(statistics)
    padded = [pad_to(run.params, wide.params) for run in runs]
    params = jax.tree.map(lambda *leaves: jax.numpy.stack(leaves), *padded)
    # One vocabulary: the program of a single task's members, with nothing masked.
    vocab_sizes = None if len(set(sizes)) == 1 else np.asarray(sizes, np.int32)
    settings = {name: np.asarray(values, np.float32) for name, values in
                members_model_settings([run.config for run in runs]).items()} or None
    own_ranges = None if len(ranges) == 1 else np.asarray(member_ranges, np.int32)
    keys = jax.random.wrap_key_data(jax.numpy.stack(
        [jax.random.key_data(eval_position_key(run.config.seed)) for run in runs]))
    start = time.perf_counter()
    rows: list[list[LengthResult]] = [[] for _ in runs]
    bar = tqdm(lengths, desc="eval" if len(runs) == 1 else f"eval {len(runs)} members",
               unit="length", delay=PROGRESS_DELAY_S, leave=False, dynamic_ncols=True)
    for length in bar:
        # the rows of one member's batch that fit its share of the memory budget, at the
        # widths every member's batch is padded to
        firsts = [next(data.eval_batches(dataset, length, batch_size, buckets,
                                         widths=plan[length]))
                  for dataset, plan in zip(datasets, plans, strict=True)]
        widest_batch = {key: value[0] for key, value in data.stack_batches(firsts).items()}
        batch_rows = planner.rows_for(padded[0], widest_batch, batch_size, members=len(runs))
        pending = [stacked_statistics(params, batch, keys, np.int32(index * batch_rows),
                                      vocab_sizes, settings, own_ranges)
                   for index, batch in enumerate(stacked_eval_batches(
                       datasets, plans, length, batch_rows, buckets))]
        for k, member_rows in enumerate(rows):
            totals: dict[str, float] = {}
            for sums in pending:
                for key, value in sums.items():
                    totals[key] = totals.get(key, 0.0) + float(
                        np.sum(np.asarray(value)[k], dtype=np.float64))
            member_rows.append(summarize_length(length, totals))
    seconds = time.perf_counter() - start
    return [EvalResult(rows=member_rows, compilations=len(compiled_shapes),
                       compiled_shapes=list(compiled_shapes), seconds=seconds)
            for member_rows in rows]


def stacked_eval_batches(datasets: Sequence[Any],
                         plans: Sequence[Mapping[int, tuple[int, int, int]]],
                         length: int, rows: int,
                         buckets: Sequence[int]) -> Iterator[dict[str, np.ndarray]]:
    """``[M, rows, ...]``: the members' eval batches of ``length`` (member k's of
    ``datasets[k]``, padded to ``plans[k][length]``) stacked to the widest member's widths; a
    member with fewer batches than another gets batches of padding rows."""
    streams = [data.eval_batches(dataset, length, rows, buckets, widths=plan[length])
               for dataset, plan in zip(datasets, plans, strict=True)]
    firsts = None
    for batches in itertools.zip_longest(*streams):
        firsts = firsts or batches  # every member has at least one batch of each length
        yield data.stack_batches([batch if batch is not None else padding_batch(own, rows)
                                  for batch, own in zip(batches, firsts, strict=True)])


def padding_batch(like: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """A batch of ``rows`` rows of padding alone (zeros: no real token, length 0) at the
    widths of ``like``: it counts nothing."""
    return {key: np.zeros((rows, *value.shape[1:]), value.dtype) for key, value in like.items()}
