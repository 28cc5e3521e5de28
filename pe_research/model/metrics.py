"""The metric table: every evaluation metric defined once, read by every consumer.

A metric is a per-example numerator (summed over examples) divided by a per-example count
(tokens or sequences), so batches and hosts add up exactly. Over the lengths of a range it is
averaged; over seeds it is summarised as mean ± std (ddof=1) and the best seed (max, or min when
lower is better), the papers' choice. Training-time evaluation computes the teacher-forced
metrics; range evaluation (`pe-research eval`) computes all of them, the decoded ones with the
cached greedy decoder. The JSON/CSV writers, `compare`, the plots and the validation of
``train.best_metric`` all read ``METRICS``; adding a metric is one ``register`` call.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pe_research.core.errors import ConfigError
from pe_research.tasks.registry import TASKS
from pe_research.tasks.vocabulary import EOS_ID

Z_95 = 1.959963984540054  # two-sided 95% normal quantile
HEADLINE = "exact_match"


@dataclasses.dataclass(frozen=True)
class Outputs:
    """What a metric reads from one padded batch of B examples, T target positions, V tokens:
    ``logits`` [B, T, V], ``targets`` and ``mask`` [B, T] (True on real target tokens, EOS
    included), ``decoded`` [B, T] greedy-decoded tokens (range evaluation only, else None),
    ``oracle_decoded`` [B, T] decoded at the true length (``eval.oracle_length`` only)."""

    logits: jax.Array
    targets: jax.Array
    mask: jax.Array
    decoded: jax.Array | None = None
    oracle_decoded: jax.Array | None = None

    @property
    def real(self) -> jax.Array:
        """Rows holding an example (rows that only pad the batch dimension have no token)."""
        return jnp.any(self.mask, axis=-1)

    @property
    def output(self) -> jax.Array:
        """``[B, T]`` True on the task's output tokens: the real targets before the end token."""
        return self.mask & (self.targets != EOS_ID)

    def token_hits(self, predictions_BxT: jax.Array) -> jax.Array:
        """Per-example count ``[B]`` of real target tokens predicted right."""
        return jnp.sum((predictions_BxT == self.targets) & self.mask, axis=-1)

    def sequence_hits(self, predictions_BxT: jax.Array) -> jax.Array:
        """Per-example ``[B]`` 1 when every real target token is right (0 on padding rows)."""
        return sequence_correct(predictions_BxT, self.targets, self.mask) & self.real

    def stop_offset(self, predictions_BxT: jax.Array) -> jax.Array:
        """Per-example ``[B]`` where the prediction's first end token is, minus where the
        target's is: < 0 stopped early, > 0 late (no end token at all counts as the width T);
        0 on padding rows."""
        width = predictions_BxT.shape[-1]
        positions = jnp.arange(width)
        stop = jnp.min(jnp.where(predictions_BxT == EOS_ID, positions, width), axis=-1)
        true_stop = jnp.sum(self.mask, axis=-1) - 1
        return jnp.where(self.real, stop - true_stop, 0)


# Per-example denominators ``[B]``: what a metric's numerator is a fraction (or mean) of.
COUNTS: dict[str, Callable[[Outputs], jax.Array]] = {
    "tokens": lambda o: jnp.sum(o.mask, axis=-1),
    "sequences": lambda o: o.real,
    "output_tokens": lambda o: jnp.sum(o.output, axis=-1),
}


@dataclasses.dataclass(frozen=True)
class Metric:
    """One row of the table."""

    name: str
    per_example: Callable[[Outputs], jax.Array]  # numerator ``[B]``, summed over examples
    count: str  # a key of COUNTS: the denominator, summed over examples
    label: str  # axis label, without the unit
    unit: str  # '%' for fractions shown as percentages, else the unit of the value
    higher_is_better: bool = True
    decoded: bool = False  # needs greedy decoding: range evaluation only
    oracle: bool = False  # needs decoding at the true length: only with eval.oracle_length
    interval: bool = False  # a fraction of sequences: report its 95% Wilson interval
    transform: Callable[[float], float] | None = None  # applied to the ratio (perplexity: exp)
    log_axis: bool = False  # drawn on a log scale (values that span orders of magnitude)

    def value(self, sums: Mapping[str, float]) -> float:
        """Over examples: the summed numerator over the summed count (then ``transform``)."""
        ratio = float(sums[self.name]) / max(float(sums[self.count]), 1.0)
        return self.transform(ratio) if self.transform else ratio

    def over_lengths(self, values: Sequence[float]) -> float:
        """Over the lengths of a range (in distribution, beyond it): the mean; NaN if empty."""
        return float(np.mean(values)) if len(values) else float("nan")

    def best(self, values: np.ndarray, axis: int = 0) -> np.ndarray:
        """Over seeds: the best one (max, or min when lower is better)."""
        return values.max(axis=axis) if self.higher_is_better else values.min(axis=axis)

    @property
    def best_mode(self) -> str:
        """'max' or 'min', as checkpoint managers take it."""
        return "max" if self.higher_is_better else "min"

    @property
    def axis_label(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label

    def display(self, value: float | None) -> str:
        """A value as a table shows it: percentages for fractions."""
        if value is None or np.isnan(value):
            return "n/a"
        return f"{100 * value:.1f}" if self.unit == "%" else f"{value:.4g}"


METRICS: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add ``metric`` to the table (replacing one of the same name)."""
    if metric.count not in COUNTS:
        raise ValueError(f"metric {metric.name}: count must be one of {sorted(COUNTS)}")
    METRICS[metric.name] = metric
    return metric


def unregister(name: str) -> None:
    """Remove a metric from the table (tests that add one clean up with this)."""
    METRICS.pop(name, None)


def get_metric(name: str, key: str = "--metric") -> Metric:
    """The metric called ``name``; ConfigError naming ``key`` and the valid names."""
    if name not in METRICS:
        raise ConfigError(key, name, f"choose one of {tuple(METRICS)}")
    return METRICS[name]


def training_metrics() -> list[Metric]:
    """Metrics computed without decoding: those of training-time evaluation."""
    return [m for m in METRICS.values() if not m.decoded]


def range_metrics(oracle_length: bool) -> list[Metric]:
    """Metrics of range evaluation: all, less the oracle-length ones unless asked for."""
    return [m for m in METRICS.values() if oracle_length or not m.oracle]


def token_cross_entropy(logits_BxTxV: jax.Array, targets_BxT: jax.Array,
                        mask_BxT: jax.Array) -> jax.Array:
    """Mean cross-entropy (float32) over the real (mask=True) target tokens: the training loss."""
    losses = optax.softmax_cross_entropy_with_integer_labels(
        logits_BxTxV.astype(jnp.float32), targets_BxT)
    weights = mask_BxT.astype(jnp.float32)
    return jnp.sum(losses * weights) / jnp.maximum(jnp.sum(weights), 1.0)


def sequence_correct(predictions_BxT: jax.Array, targets_BxT: jax.Array,
                     mask_BxT: jax.Array) -> jax.Array:
    """Per-sequence exact match ``[B]``: every real target token right."""
    return jnp.all((predictions_BxT == targets_BxT) | ~mask_BxT, axis=-1)


def _loss_sum(o: Outputs) -> jax.Array:
    losses = optax.softmax_cross_entropy_with_integer_labels(
        o.logits.astype(jnp.float32), o.targets)
    return jnp.sum(jnp.where(o.mask, losses, 0.0), axis=-1)


def _exp(nats: float) -> float:
    """``e ** nats``; infinity where a float overflows (a model that has diverged)."""
    return math.exp(nats) if nats < 709.0 else math.inf


def _forced(o: Outputs) -> jax.Array:
    return jnp.argmax(o.logits, axis=-1)


register(Metric("exact_match", lambda o: o.sequence_hits(o.decoded), "sequences",
                "decoded exact match", "%", decoded=True, interval=True))
register(Metric("decoded_token_accuracy", lambda o: o.token_hits(o.decoded), "tokens",
                "decoded token accuracy", "%", decoded=True))
# The Chomsky-hierarchy / randomized-PE papers' score: per-token accuracy on the output tokens
# (nothing after the end token counts), averaged over the test lengths: `accuracy_fn` and
# `accuracy_mask` of GeneralizationTask in tasks/task.py and range_evaluation.py of
# google-deepmind/neural_networks_chomsky_hierarchy (Deletang et al. 2023).
register(Metric("output_token_accuracy",
                lambda o: jnp.sum((o.decoded == o.targets) & o.output, axis=-1),
                "output_tokens", "decoded per-token accuracy on output tokens (the papers')", "%",
                decoded=True))
# Newman et al. 2020 ("The EOS Decision and Length Extrapolation", Sec. 3): decoded with the
# end token forced at the true length and forbidden before it, so a model that writes the right
# tokens but stops at the wrong place (or, trained without EOS, never stops) still scores.
register(Metric("oracle_exact_match", lambda o: o.sequence_hits(o.oracle_decoded), "sequences",
                "exact match at the oracle length", "%", decoded=True, oracle=True,
                interval=True))
# Where a free decode goes wrong: at the stop, or in the tokens. Newman et al. 2020 trace +EOS
# models' failures to their end-token decision ("length attractors"); a sequence that stops
# early cannot be right, and one that stops late is wrong whatever it wrote.
register(Metric("stopped_early", lambda o: o.stop_offset(o.decoded) < 0, "sequences",
                "stopped early (decoded)", "%", higher_is_better=False,
                decoded=True, interval=True))
register(Metric("stopped_late", lambda o: o.stop_offset(o.decoded) > 0, "sequences",
                "stopped late or never (decoded)", "%", higher_is_better=False,
                decoded=True, interval=True))
register(Metric("missing_tokens", lambda o: jnp.maximum(-o.stop_offset(o.decoded), 0),
                "sequences", "tokens missing (decoded)",
                "tokens", higher_is_better=False, decoded=True))
register(Metric("token_accuracy", lambda o: o.token_hits(_forced(o)), "tokens",
                "teacher-forced token accuracy", "%"))
register(Metric("sequence_accuracy", lambda o: o.sequence_hits(_forced(o)), "sequences",
                "teacher-forced sequence accuracy", "%"))
register(Metric("loss", _loss_sum, "tokens", "teacher-forced cross-entropy", "nats/token",
                higher_is_better=False))
# Language modelling's score (Press et al. 2022, "Train Short, Test Long", sec. 4): e to the
# mean cross-entropy of a length's tokens; averaged over lengths like every metric.
register(Metric("perplexity", _loss_sum, "tokens", "teacher-forced perplexity", "",
                higher_is_better=False, transform=_exp, log_axis=True))


def headline_for(task_name: str) -> str:
    """The metric that curves and tables of ``task_name`` show first (the task's ``metric``)."""
    return TASKS[task_name].metric if task_name in TASKS else HEADLINE


def example_sums(outputs: Outputs, metrics: Sequence[Metric]) -> dict[str, jax.Array]:
    """Per-example ``[B]`` float32 numerators of ``metrics`` and every count of ``COUNTS``."""
    sums = {m.name: m.per_example(outputs).astype(jnp.float32) for m in metrics}
    sums.update({name: count(outputs).astype(jnp.float32) for name, count in COUNTS.items()})
    return sums


def batch_values(outputs: Outputs, metrics: Sequence[Metric]) -> dict[str, jax.Array]:
    """Each metric over one batch (traced: a scalar per metric)."""
    sums = {k: jnp.sum(v) for k, v in example_sums(outputs, metrics).items()}
    return {m.name: sums[m.name] / jnp.maximum(sums[m.count], 1.0) for m in metrics}


def wilson_interval(successes: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when there are no trials."""
    if total == 0:
        return 0.0, 1.0
    p, z2 = successes / total, z * z
    centre = (p + z2 / (2 * total)) / (1 + z2 / total)
    half = z / (1 + z2 / total) * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(sums: Mapping[str, float], metrics: Sequence[Metric]) -> dict[str, float]:
    """Values (and Wilson bounds ``<name>_low``/``_high`` for interval metrics) from sums."""
    values = {}
    for metric in metrics:
        values[metric.name] = metric.value(sums)
        if metric.interval:
            low, high = wilson_interval(round(float(sums[metric.name])),
                                        round(float(sums[metric.count])))
            values[f"{metric.name}_low"], values[f"{metric.name}_high"] = low, high
    return values
