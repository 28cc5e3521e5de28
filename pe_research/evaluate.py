"""Range evaluation: accuracy against task length on the frozen eval sets, one compile per bucket.

For every length n of a grid, every example of the frozen eval set at n is scored three ways:
teacher-forced (token accuracy, loss) and greedy-decoded with the key/value cache (token accuracy
and exact match, the headline, with a 95% Wilson interval). Batches are padded to the length
buckets of ``data.buckets``, so the jitted function compiles once per (source, target) bucket
pair, never once per length.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from pe_research import data
from pe_research.checkpoint import CHECKPOINT_DIR, Checkpointer, abstract_like
from pe_research.config import load_run_config, split_override
from pe_research.errors import ConfigError
from pe_research.mesh import data_mesh, replicated, to_host
from pe_research.metrics import sequence_correct
from pe_research.model.decoding import greedy_decode
from pe_research.positional.randomize import randomize_settings
from pe_research.positional.registry import scheme_class
from pe_research.steps import EVAL_KEY_TAG, batch_positions
from pe_research.tasks import EOS_ID, VOCABULARY_FILE, Vocabulary, get_task
from pe_research.train_eval import eval_cache_dir
from pe_research.train_state import abstract_model
from pe_research.validation import best_mode

Z_95 = 1.959963984540054  # two-sided 95% normal quantile
PER_EXAMPLE = ("real", "tokens", "loss", "teacher_forced_correct", "decoded_correct", "exact")


@dataclasses.dataclass(frozen=True)
class LengthResult:
    """Metrics over every eval example of one task length."""

    length: int
    samples: int
    token_accuracy: float  # teacher-forced
    decoded_token_accuracy: float
    exact_match: float  # greedy-decoded sequence == target (EOS included): the headline
    exact_match_low: float  # 95% Wilson interval
    exact_match_high: float
    loss: float  # teacher-forced cross-entropy per target token (nats)


ROW_FIELDS = tuple(field.name for field in dataclasses.fields(LengthResult))


@dataclasses.dataclass
class EvalResult:
    """One curve: a row per length, plus how many shapes were compiled and how long it took."""

    rows: list[LengthResult]
    compilations: int
    compiled_shapes: list[tuple[int, int, int]]  # (batch, source width, target width)
    seconds: float


def wilson_interval(successes: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when there are no trials."""
    if total == 0:
        return 0.0, 1.0
    p, z2 = successes / total, z * z
    centre = (p + z2 / (2 * total)) / (1 + z2 / total)
    half = z / (1 + z2 / total) * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize_length(length: int, totals: Mapping[str, float]) -> LengthResult:
    """A ``LengthResult`` from per-length sums of the ``PER_EXAMPLE`` statistics."""
    samples, tokens = int(totals["real"]), max(totals["tokens"], 1.0)
    exact = int(totals["exact"])
    low, high = wilson_interval(exact, samples)
    return LengthResult(
        length=int(length), samples=samples,
        token_accuracy=totals["teacher_forced_correct"] / tokens,
        decoded_token_accuracy=totals["decoded_correct"] / tokens,
        exact_match=exact / max(samples, 1), exact_match_low=low, exact_match_high=high,
        loss=totals["loss"] / tokens)


def example_statistics(model: Any, batch: Mapping[str, jax.Array],
                       position_key: jax.Array) -> dict[str, jax.Array]:
    """Per-example ``[B]`` sums (``PER_EXAMPLE``) of one padded batch; traced once per shape."""
    pe = model.config.pe
    source_positions, target_positions = batch_positions(pe, batch, position_key, training=False)
    targets, mask = batch["target_output"], batch["target_mask"]
    logits = model(batch["source"], batch["target_input"], source_positions, target_positions,
                   batch["source_mask"], mask)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    decoded = greedy_decode(model, batch["source"], source_positions, batch["source_mask"],
                            target_positions, eos_id=EOS_ID)
    real = jnp.any(mask, axis=-1)  # rows that only pad the batch dimension have no real token

    def count(hits_BxT):
        return jnp.sum(hits_BxT & mask, axis=-1).astype(jnp.int32)

    return {
        "real": real.astype(jnp.int32),
        "tokens": count(jnp.ones_like(mask)),
        "loss": jnp.sum(jnp.where(mask, losses, 0.0), axis=-1),
        "teacher_forced_correct": count(jnp.argmax(logits, -1) == targets),
        "decoded_correct": count(decoded == targets),
        "exact": (sequence_correct(decoded, targets, mask) & real).astype(jnp.int32),
    }


def eval_position_key(seed: int) -> jax.Array:
    """The key the training-time evaluation draws positions from (matters only if randomized)."""
    return jax.random.split(jax.random.fold_in(jax.random.key(seed), EVAL_KEY_TAG))[0]


def check_positions_fit(pe: Mapping[str, Any], widths: Mapping[int, tuple[int, int]]) -> None:
    """ConfigError before compiling if the scheme cannot represent the positions needed."""
    max_position, policy = randomize_settings(pe)
    randomized = max_position > 0 and policy == "randomized"
    for length, (source_width, target_width) in sorted(widths.items()):
        needed = max_position if randomized else max(source_width, target_width)
        try:
            scheme_class(pe["type"]).check_positions(pe, needed)
        except ConfigError as error:
            raise ConfigError(error.key, error.value,
                              f"{error.valid} (task length {length} is padded to "
                              f"{max(source_width, target_width)} tokens)") from None


class RangeEvaluator:
    """A model's parameters evaluated over a grid of lengths; compiles once per batch shape."""

    def __init__(self, config: ml_collections.ConfigDict, graphdef: Any, rest: Any, mesh: Mesh):
        self.config, self.mesh = config, mesh
        self.compiled_shapes: list[tuple[int, int, int]] = []
        position_key = eval_position_key(config.seed)

        def statistics(params, batch):
            shape = (*batch["source"].shape, batch["target_input"].shape[1])
            self.compiled_shapes.append(shape)  # runs at trace time: once per compiled shape
            return example_statistics(nnx.merge(graphdef, params, rest), batch, position_key)

        self.statistics = jax.jit(statistics, out_shardings=replicated(mesh))

    @property
    def compilations(self) -> int:
        return len(self.compiled_shapes)

    def plan(self, dataset: Any, lengths: Sequence[int], batch_size: int,
             buckets: Sequence[int]) -> dict[int, tuple[int, int]]:
        """Padded (source, target) widths per length; every check that can fail runs here."""
        if batch_size % self.mesh.size:
            raise ConfigError("eval.batch_size", batch_size,
                              f"must be a multiple of the {self.mesh.size} devices in use")
        widths = {}
        for length in lengths:
            first = next(data.eval_batches(dataset, length, batch_size, buckets,
                                           jax.process_index(), jax.process_count()))
            widths[length] = (first["source"].shape[1], first["target_input"].shape[1])
        check_positions_fit(self.config.model.pe, widths)
        return widths

    def __call__(self, params: Any, dataset: Any, lengths: Sequence[int], batch_size: int,
                 buckets: Sequence[int]) -> EvalResult:
        """Evaluate ``params`` at every length; rows in the order of ``lengths``."""
        self.plan(dataset, lengths, batch_size, buckets)
        start, compiled_before = time.perf_counter(), self.compilations
        rows = []
        for length in lengths:
            pending = [self.statistics(params, data.global_batch(batch, self.mesh))
                       for batch in data.eval_batches(dataset, length, batch_size, buckets,
                                                      jax.process_index(), jax.process_count())]
            totals = dict.fromkeys(PER_EXAMPLE, 0.0)
            for statistics in pending:
                for key, value in statistics.items():
                    totals[key] += float(np.sum(to_host(value), dtype=np.float64))
            rows.append(summarize_length(length, totals))
        return EvalResult(rows=rows, compilations=self.compilations - compiled_before,
                          compiled_shapes=self.compiled_shapes[compiled_before:],
                          seconds=time.perf_counter() - start)


# Keys a saved run may change at evaluation: test-time settings, never the trained model or task.
EVAL_SAFE_KEYS = ("model.pe.scaling", "model.pe.randomize.eval_policy", "model.dtype",
                  "model.attention_implementation", "data.buckets", "data.eval_samples",
                  "data.eval_cache_dir", "eval", "wandb")


def check_eval_overrides(overrides: Sequence[str]) -> None:
    """ConfigError for an override that would change what was trained (weights, task, data)."""
    for text in overrides:
        key, value = split_override(text)
        if not any(key == safe or key.startswith(safe + ".") for safe in EVAL_SAFE_KEYS):
            raise ConfigError(key, value, "cannot change at evaluation (the checkpoint was "
                              "trained with the stored value); eval-time keys are "
                              + ", ".join(EVAL_SAFE_KEYS))


@dataclasses.dataclass
class LoadedRun:
    """A run's config, task and restored parameters, placed replicated on ``mesh``."""

    run_dir: Path
    config: ml_collections.ConfigDict
    task: Any
    step: int
    graphdef: Any
    params: Any
    rest: Any
    mesh: Mesh


def resolve_step(checkpointer: Checkpointer, checkpoint: str | int) -> int:
    """'latest', 'best' (the latest if no metric was tracked) or a saved step number."""
    steps = checkpointer.steps()
    if not steps:
        raise ConfigError("--step", checkpoint, f"no checkpoints in {checkpointer.directory}")
    if checkpoint == "latest":
        return steps[-1]
    if checkpoint == "best":
        best = checkpointer.best_step()
        return steps[-1] if best is None else best
    if str(checkpoint).isdigit() and int(checkpoint) in steps:
        return int(checkpoint)
    raise ConfigError("--step", checkpoint, f"'latest', 'best' or one of the saved steps {steps}")


def load_run(run_dir: str | Path, checkpoint: str | int | None = None,
             overrides: Sequence[str] = (), mesh: Mesh | None = None) -> LoadedRun:
    """Restore a checkpoint of ``run_dir`` onto the devices present (any count, any kind).

    ``checkpoint``: 'latest', 'best' or a step; None takes ``eval.checkpoint`` of the config.
    """
    run_dir = Path(run_dir).absolute()
    check_eval_overrides(overrides)
    config = load_run_config(run_dir, overrides)
    vocabulary = Vocabulary.load(run_dir) if (run_dir / VOCABULARY_FILE).exists() else None
    task = get_task(config.task.to_dict(), config.data.to_dict(), vocabulary=vocabulary)
    mesh = mesh or data_mesh()
    metric = config.train.best_metric if config.train.eval_every else ""
    checkpointer = Checkpointer(run_dir / CHECKPOINT_DIR, best_metric=metric,
                                best_mode=best_mode(metric), read_only=True)
    step = resolve_step(checkpointer, config.eval.checkpoint if checkpoint is None else checkpoint)
    graphdef, abstract_params, rest = nnx.split(
        abstract_model(config, task.vocabulary.size), nnx.Param, ...)
    restored = checkpointer.restore(step, params=abstract_like(abstract_params, replicated(mesh)))
    return LoadedRun(run_dir, config, task, step, graphdef, restored["params"], rest, mesh)


def default_lengths(config: ml_collections.ConfigDict) -> tuple[int, ...]:
    """``eval.lengths``, or every length from the shortest trained up to twice the longest."""
    if config.eval.lengths:
        return tuple(int(n) for n in config.eval.lengths)
    low, high = (int(n) for n in config.data.train_lengths)
    return tuple(range(low, 2 * high + 1))


def evaluate_run(run: LoadedRun, lengths: Sequence[int] | None = None,
                 buckets: Sequence[int] | None = None) -> EvalResult:
    """Evaluate a loaded run over ``lengths`` (default ``default_lengths``) on its eval sets."""
    config = run.config
    lengths = tuple(int(n) for n in (lengths or default_lengths(config)))
    run.task.check_lengths(lengths, "--lengths")
    dataset = data.eval_dataset(run.task, lengths, config.data.eval_samples, config.seed,
                                str(eval_cache_dir(config, run.run_dir)))
    evaluator = RangeEvaluator(config, run.graphdef, run.rest, run.mesh)
    return evaluator(run.params, dataset, lengths, config.eval.batch_size,
                     tuple(buckets or config.data.buckets))
