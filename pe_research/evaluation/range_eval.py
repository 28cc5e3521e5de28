"""Range evaluation: accuracy against task length on the frozen eval sets, one compile per bucket.

For every length n of a grid, every example of the frozen eval set at n is scored by every metric
of the metric table (``evaluation.metrics``): teacher-forced (token and sequence accuracy, loss)
and greedy-decoded with the key/value cache (token accuracy and exact match, the headline, with
a 95% Wilson interval). Batches are padded to the length buckets of ``data.buckets``, the
target to the widest target of its source bucket (``data.one_shape_per_source_bucket``), so the
jitted function compiles at most once per bucket, never once per length.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from tqdm import tqdm

from pe_research import data
from pe_research.core.errors import ConfigError, check_divisible
from pe_research.evaluation import memory
from pe_research.evaluation.batch_statistics import (
    decodes_at_oracle_length,
    example_statistics,
    task_decodes,
)
from pe_research.model.attention import set_query_block
from pe_research.model.inputs import eval_position_key
from pe_research.model.metrics import HEADLINE, METRICS, headline_for, summarize
from pe_research.positional.randomize import randomize_settings
from pe_research.positional.registry import scheme_class
from pe_research.runs.restore import LoadedRun
from pe_research.runs.run_dir import RunDir
from pe_research.runtime import DATA_AXIS, batch_multiple, check_batch_fits, replicated, to_host


@dataclasses.dataclass(frozen=True)
class LengthResult:
    """Every metric of the table over the eval examples of one task length.

    ``values`` maps metric names (and ``<name>_low``/``_high``, the 95% Wilson interval of
    interval metrics) to values; ``row.exact_match`` reads ``values['exact_match']``.
    """

    length: int
    samples: int
    values: dict[str, float]

    def __getattr__(self, name: str) -> float:
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"no metric {name!r} in this row; metrics: {sorted(values)}")

    def as_dict(self) -> dict[str, float]:
        """One flat record: length, samples and every value (the JSON/CSV row)."""
        return {"length": self.length, "samples": self.samples, **self.values}


def row_fields(rows: Sequence[LengthResult]) -> list[str]:
    """Columns of a results table: length, samples, then every value the rows hold."""
    fields = ["length", "samples"]
    for row in rows:
        fields += [name for name in row.values if name not in fields]
    return fields


@dataclasses.dataclass
class EvalResult:
    """One curve: a row per length, plus how many shapes were compiled and how long it took;
    ``evaluate_run`` adds what ``plot`` labels it with."""

    rows: list[LengthResult]
    compilations: int
    compiled_shapes: list[tuple[int, int, int]]  # (batch, source width, target width)
    seconds: float
    headline: str = HEADLINE
    train_lengths: tuple[int, ...] = ()
    title: str = ""

    def plot(self, ax: Any = None) -> Any:
        """The curve as a ``matplotlib.figure.Figure`` (drawn into ``ax`` when given)."""
        from pe_research.evaluation.plots import curve_figure

        return curve_figure([row.as_dict() for row in self.rows], self.headline,
                            self.train_lengths, self.title, ax)


def summarize_length(length: int, totals: Mapping[str, float]) -> LengthResult:
    """A ``LengthResult`` from per-length sums of each metric's numerator and count (the
    metrics the sums hold: the oracle-length ones only when evaluated)."""
    metrics = [metric for metric in METRICS.values() if metric.name in totals]
    return LengthResult(length=int(length), samples=int(totals["sequences"]),
                        values=summarize(totals, metrics))


PROGRESS_DELAY_S = 3.0  # a bar only for evaluations a person waits for


def check_positions_fit(pe: Mapping[str, Any], widths: Mapping[int, tuple[int, int, int]],
                        single_stack: bool = False) -> None:
    """ConfigError before compiling if the scheme cannot represent the positions needed (a
    single-stack model's positions run over its joint sequence: source and target together)."""
    max_position, policy = randomize_settings(pe)
    randomized = max_position > 0 and policy == "randomized"
    for length, (source_width, target_width, joint_width) in sorted(widths.items()):
        joint = joint_width if single_stack else max(source_width, target_width)
        needed = max_position if randomized else joint
        try:
            scheme_class(pe["type"]).check_positions(pe, needed)
        except ConfigError as error:
            raise ConfigError(error.key, error.value,
                              f"{error.valid} (task length {length} is padded to "
                              f"{joint} tokens)") from None


class RangeEvaluator:
    """A model's parameters evaluated over a grid of lengths; compiles once per batch shape.

    A batch whose estimated memory (``evaluation.memory``) exceeds ``eval.memory_budget_gb``
    is split into smaller batches of one shape; the numbers do not change.
    """

    def __init__(self, config: ml_collections.ConfigDict, graphdef: Any, rest: Any, mesh: Mesh):
        self.config, self.mesh = config, mesh
        self.compiled_shapes: list[tuple[int, int, int]] = []
        self.batch_rows: dict[tuple[int, int, int], int] = {}  # (source, target, batch) -> rows
        position_key = eval_position_key(config.seed)
        oracle_length, decode = decodes_at_oracle_length(config), task_decodes(config)

        def statistics(params, batch, first_row, key):
            model = set_query_block(nnx.merge(graphdef, params, rest), config.eval.query_block)
            return example_statistics(model, batch, key, oracle_length, first_row, decode)

        # The key is an argument, not a constant of the program: one compile for every seed.
        def traced_statistics(params, batch, first_row, key):
            shape = (*batch["source"].shape, batch["target_input"].shape[1])
            self.compiled_shapes.append(shape)  # runs at trace time: once per compiled shape
            return statistics(params, batch, first_row, key)

        self.unjitted_statistics = lambda params, batch, first_row=0: statistics(
            params, batch, first_row, position_key)
        self.position_key = position_key
        self.statistics_program = jax.jit(traced_statistics, out_shardings=replicated(mesh))
        self.statistics = lambda params, batch, first_row=0: self.statistics_program(
            params, batch, first_row, position_key)

    def rows_for(self, params: Any, batch: Mapping[str, np.ndarray], batch_size: int,
                 members: int = 1) -> int:
        """Rows per batch at this batch's widths: ``batch_size``, halved while the estimate
        exceeds the memory budget (traced once per widths, never compiled); ``members`` models
        evaluated in one program share the budget."""
        key = (batch["source"].shape[1], batch["target_input"].shape[1], batch_size)
        if key not in self.batch_rows:
            budget = memory.budget_bytes(self.config.eval.memory_budget_gb,
                                         self.mesh.devices.flat[0]) // members
            fixed = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
            full = memory.estimate_bytes(self.unjitted_statistics, params, {
                key: jax.ShapeDtypeStruct((batch_size, *value.shape[1:]), value.dtype)
                for key, value in batch.items()}) - fixed
            devices = self.mesh.shape[DATA_AXIS]  # each device holds rows / devices of them
            rows = memory.rows_within_budget(
                batch_size, devices, lambda rows: fixed + full * rows // (batch_size * devices),
                budget)
            self.batch_rows[key] = rows
        return self.batch_rows[key]

    @property
    def compilations(self) -> int:
        return len(self.compiled_shapes)

    def plan(self, dataset: Any, lengths: Sequence[int], batch_size: int,
             buckets: Sequence[int]) -> dict[int, tuple[int, int, int]]:
        """Padded (source, target, joint) widths per length; every check that can fail runs
        here."""
        check_batch_fits("eval.batch_size", batch_size, self.mesh)
        check_divisible("eval.batch_size", batch_size, jax.process_count(), "process count")
        widths = data.eval_widths(dataset, lengths, buckets)
        check_positions_fit(self.config.model.pe, widths,
                            self.config.model.architecture != "encoder_decoder")
        return widths

    def __call__(self, params: Any, dataset: Any, lengths: Sequence[int], batch_size: int,
                 buckets: Sequence[int], *, progress: bool = False) -> EvalResult:
        """Evaluate ``params`` at every length; rows in the order of ``lengths``.

        With ``progress``, a bar over lengths appears once evaluation has taken a few seconds.
        """
        widths = self.plan(dataset, lengths, batch_size, buckets)
        batch_size = data.eval_batch_rows(dataset, lengths, batch_size, batch_multiple(self.mesh))
        start, compiled_before = time.perf_counter(), self.compilations
        rows = []
        bar = tqdm(lengths, desc="eval", unit="length", delay=PROGRESS_DELAY_S, leave=False,
                   disable=not progress or jax.process_index() != 0, dynamic_ncols=True)
        for length in bar:
            first = next(data.eval_batches(dataset, length, batch_size, buckets,
                                           widths=widths[length]))
            batch_rows = self.rows_for(params, first, batch_size)
            pending = [self.statistics(params, data.global_batch(batch, self.mesh),
                                       np.int32(index * batch_rows))
                       for index, batch in enumerate(data.eval_batches(
                           dataset, length, batch_rows, buckets, jax.process_index(),
                           jax.process_count(), widths[length]))]
            totals: dict[str, float] = {}
            for statistics in pending:
                for key, value in statistics.items():
                    totals[key] = totals.get(key, 0.0) + float(
                        np.sum(to_host(value), dtype=np.float64))
            rows.append(summarize_length(length, totals))
        return EvalResult(rows=rows, compilations=self.compilations - compiled_before,
                          compiled_shapes=self.compiled_shapes[compiled_before:],
                          seconds=time.perf_counter() - start)


def default_lengths(config: ml_collections.ConfigDict) -> tuple[int, ...]:
    """``eval.lengths``, or every length from the shortest trained up to twice the longest."""
    if config.eval.lengths:
        return tuple(int(n) for n in config.eval.lengths)
    low, high = (int(n) for n in config.data.train_lengths)
    return tuple(range(low, 2 * high + 1))


def run_evaluator(run: LoadedRun, lengths: Sequence[int] | None = None,
                  buckets: Sequence[int] | None = None, *, progress: bool = True,
                  ) -> Callable[[Any], EvalResult]:
    """``params -> EvalResult`` over ``lengths`` (default ``default_lengths``) on the run's
    frozen eval sets. Every call shares one compiled program per batch shape, so parameter
    variants of one model (a head's output rows zeroed, say) cost no recompilation."""
    config = run.config
    lengths = tuple(int(n) for n in (lengths or default_lengths(config)))
    run.task.check_lengths(lengths, "--lengths")
    dataset = data.eval_dataset(run.task, lengths, config.data.eval_samples, config.seed,
                                str(RunDir(run.run_dir).eval_data(config.data)))
    evaluator = RangeEvaluator(config, run.graphdef, run.rest, run.mesh)
    buckets = tuple(buckets or config.data.buckets)
    return lambda params: evaluator(params, dataset, lengths, config.eval.batch_size, buckets,
                                    progress=progress)


def evaluate_run(run: LoadedRun, lengths: Sequence[int] | None = None,
                 buckets: Sequence[int] | None = None) -> EvalResult:
    """Evaluate a loaded run (``load_run``) over ``lengths`` (default ``default_lengths``) on its
    frozen eval sets; one row per length, every metric of the table."""
    result = run_evaluator(run, lengths, buckets)(run.params)
    config = run.config
    return dataclasses.replace(
        result, headline=headline_for(config.task.name),
        train_lengths=tuple(config.data.train_lengths),
        title=f"{config.task.name}, pe={config.model.pe.type}, step {run.step}")
