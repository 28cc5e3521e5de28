"""A group of runs' curves summarised: in and beyond the training range, over its seeds.

Per run, a metric is averaged over the evaluated lengths inside its training range and beyond
it; per group these are summarised as the metric table says: mean ± std over seeds (std with
ddof=1) and the best seed (max for accuracies, min for losses), plus the weakest seed and the
longest length every evaluated length up to which reaches a threshold.

The randomized-PE and Chomsky-hierarchy papers (Ruoss et al. 2023, Delétang et al. 2023) average
over every integer test length with equal weight. On such a dense grid the mean over evaluated
lengths is that average; on a sparse grid (dense near the training length, as CPU sweeps use) it
is not, so ``uniform_mean`` gives it beside, interpolating linearly between evaluated lengths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pe_research.model.metrics import HEADLINE, METRICS, Metric


def range_means(curve: Any, lengths: Sequence[int], high: int) -> tuple[float, float]:
    """Mean of ``curve`` ``[L]`` over the ``lengths`` up to ``high``, and over those beyond."""
    curve, lengths = np.asarray(curve, float), np.asarray(lengths)
    return float(curve[lengths <= high].mean()), float(curve[lengths > high].mean())


def is_dense(lengths: Sequence[int]) -> bool:
    """Whether ``lengths`` are every integer from the first to the last."""
    values = sorted(int(n) for n in lengths)
    return values == list(range(values[0], values[-1] + 1)) if values else True


def uniform_mean(lengths: Sequence[int], values: Any) -> float:
    """``values`` ``[L]`` at ``lengths`` averaged over every integer length from the first to
    the last with equal weight, linear between evaluated lengths (exact on a dense grid)."""
    lengths, values = np.asarray(lengths, float), np.asarray(values, float)
    if not len(lengths):
        return float("nan")
    every = np.arange(lengths[0], lengths[-1] + 1)
    return float(np.mean(np.interp(every, lengths, values)))


@dataclasses.dataclass(frozen=True)
class RunScores:
    """One run's metric over its training lengths and beyond them (plain and uniform mean)."""

    in_dist: float
    beyond: float
    uniform: float  # beyond, averaged uniformly over every length (``uniform_mean``)
    dense: bool  # every length beyond training evaluated: ``beyond`` equals ``uniform``


def run_scores(metric: Metric, lengths: np.ndarray, values: np.ndarray,
               train_lengths: Sequence[int]) -> RunScores:
    """A run's ``values`` ``[L]`` at ``lengths`` ``[L]`` scored inside and beyond
    ``train_lengths`` (low, high)."""
    low, high = train_lengths
    inside, beyond = (lengths >= low) & (lengths <= high), lengths > high
    return RunScores(metric.over_lengths(values[inside]), metric.over_lengths(values[beyond]),
                     uniform_mean(lengths[beyond], values[beyond]), is_dense(lengths[beyond]))


def averaging_text(lengths: Sequence[int]) -> str:
    """How a mean over ``lengths`` weighs them: uniform over a dense grid, or a sparse grid."""
    if not len(lengths):
        return "no evaluated lengths"
    if len(lengths) == 1:
        return f"at length {int(lengths[0])}"
    if is_dense(lengths):
        return f"uniform over every length {lengths_text(lengths)}"
    return (f"mean over the {len(lengths)} evaluated lengths {lengths_text(lengths)} (a sparse "
            f"grid; 'uniform' beside it interpolates linearly to every length "
            f"{min(lengths)}-{max(lengths)})")


def lengths_text(lengths: Sequence[int]) -> str:
    """``12-14`` for a run of consecutive lengths, else ``8, 12, 16``."""
    values = sorted(int(n) for n in lengths)
    if len(values) > 1 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ", ".join(str(n) for n in values)


def longest_above(lengths: np.ndarray, values: np.ndarray, threshold: float) -> int | None:
    """The longest length n such that every evaluated length <= n scores >= threshold."""
    failing = np.flatnonzero(values < threshold)
    stop = failing[0] if failing.size else len(values)
    return int(lengths[stop - 1]) if stop > 0 else None


def summarize_group(group: Mapping[str, Any], threshold: float) -> dict[str, Any]:
    """In-distribution and out-of-distribution value per run, then over the group's seeds.

    Keys follow the metric's direction: ``in_dist_max`` for accuracies, ``in_dist_min`` for
    losses (the best seed); ``in_dist_worst`` is the worst seed's, and ``in_dist_weakest`` the
    worst (value, seed, length) at any training length. ``longest_*`` is only defined for
    fractions (accuracies).
    """
    metric: Metric = group["metric"]
    lengths, values = group["lengths"], group["values"]
    scores, trained = [], []
    for run_values, member in zip(values, group["members"], strict=True):
        low, high = member.train_lengths
        scores.append(run_scores(metric, lengths, run_values, (low, high)))
        inside = (lengths >= low) & (lengths <= high)
        trained += [(float(value), member.config.get("seed"), int(length))
                    for length, value in zip(lengths[inside], run_values[inside], strict=True)]
    in_dist, ood = [s.in_dist for s in scores], [s.beyond for s in scores]
    uniform, dense = [s.uniform for s in scores], all(s.dense for s in scores)
    sign = 1 if metric.higher_is_better else -1  # worst: lowest accuracy, highest loss
    weakest = min(trained, key=lambda t: sign * t[0], default=None)

    def spread(xs: list[float]) -> tuple[float, float, float]:
        """Mean, std (ddof=1; NaN for a single run) and best over the group's runs."""
        xs_array = np.asarray(xs, float)
        std = float(np.std(xs_array, ddof=1)) if len(xs) > 1 else float("nan")
        return float(np.mean(xs_array)), std, float(metric.best(xs_array))

    best = best_word(metric)
    (in_mean, in_std, in_best), (ood_mean, ood_std, ood_best) = spread(in_dist), spread(ood)
    ood_uniform, uniform_std, _ = spread(uniform)
    fraction = metric.unit == "%" and metric.higher_is_better
    return {"runs": group["runs"], "in_dist_mean": in_mean, "in_dist_std": in_std,
            f"in_dist_{best}": in_best, "in_dist_worst": min(in_dist, key=lambda v: sign * v),
            "in_dist_weakest": weakest, "ood_mean": ood_mean, "ood_std": ood_std,
            "ood_runs": [float(value) for value in ood],
            "ood_uniform_mean": ood_uniform, "ood_uniform_std": uniform_std,
            "ood_dense": dense,
            f"ood_{best}": ood_best,
            "longest_mean": longest_above(lengths, group["mean"], threshold) if fraction else None,
            f"longest_{best}": longest_above(lengths, group["best"], threshold) if fraction
            else None}


def best_word(metric: Metric) -> str:
    """'max' or 'min': how the best seed is chosen for ``metric``."""
    return "max" if metric.higher_is_better else "min"


def summary_columns(metric: Metric) -> tuple[str, ...]:
    """Columns of the CSV summary for ``metric``."""
    best = best_word(metric)
    return ("group", "runs", "in_dist_mean", "in_dist_std", f"in_dist_{best}", "ood_mean",
            "ood_std", f"ood_{best}", "longest_mean", f"longest_{best}", "ood_uniform_mean",
            "ood_uniform_std", "ood_dense")


def markdown_table(summaries: Mapping[str, Mapping[str, Any]], group_by: str,
                   threshold: float, metric: Metric | None = None) -> str:
    """The summary as a markdown table (percentages for fractions); an "OOD uniform" column
    when some group's lengths beyond training are a sparse grid."""
    metric = metric or METRICS[HEADLINE]
    best, show = best_word(metric), metric.display
    limit = f"{100 * threshold:g}%"
    fraction = metric.unit == "%"  # 'longest n above a threshold' is defined for fractions only
    sparse = not all(s.get("ood_dense", True) for s in summaries.values())
    ood = "OOD mean ± std (sparse grid)" if sparse else "OOD mean ± std"
    lines = [f"| {group_by} | runs | in-dist mean ± std | in-dist {best} | {ood} | "
             f"OOD {best} |" + (" OOD uniform (interpolated) |" if sparse else "")
             + (f" longest n ≥ {limit} (mean) | longest n ≥ {limit} ({best}) |"
                if fraction else ""),
             "|---|---:|---:|---:|---:|---:|" + ("---:|" if sparse else "")
             + ("---:|---:|" if fraction else "")]
    for name, s in summaries.items():
        lines.append(
            f"| {name} | {s['runs']} | {show(s['in_dist_mean'])} ± {show(s['in_dist_std'])}"
            f" | {show(s[f'in_dist_{best}'])} | {show(s['ood_mean'])} ± "
            f"{show(s['ood_std'])} | {show(s[f'ood_{best}'])} |"
            + (f" {show(s['ood_uniform_mean'])} ± {show(s['ood_uniform_std'])} |"
               if sparse else "")
            + (f" {s['longest_mean'] or '-'} | {s[f'longest_{best}'] or '-'} |"
               if fraction else ""))
    return "\n".join(lines)
