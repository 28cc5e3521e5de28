"""A group of runs' curves summarised: in and beyond the training range, over its seeds.

Per run, a metric is averaged over the evaluated lengths inside its training range and beyond
it; per group these are summarised as the metric table says: mean ± std over seeds (std with
ddof=1) and the best seed (max for accuracies, min for losses), plus the weakest seed and the
longest length every evaluated length up to which reaches a threshold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pe_research.model.metrics import HEADLINE, METRICS, Metric


def range_means(curve: Any, lengths: Sequence[int], high: int) -> tuple[float, float]:
    """Mean of ``curve`` ``[L]`` over the ``lengths`` up to ``high``, and over those beyond."""
    curve, lengths = np.asarray(curve, float), np.asarray(lengths)
    return float(curve[lengths <= high].mean()), float(curve[lengths > high].mean())


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
    in_dist, ood, trained = [], [], []
    for run_values, member in zip(values, group["members"], strict=True):
        low, high = member.train_lengths
        inside, beyond = (lengths >= low) & (lengths <= high), lengths > high
        in_dist.append(metric.over_lengths(run_values[inside]))
        ood.append(metric.over_lengths(run_values[beyond]))
        trained += [(float(value), member.config.get("seed"), int(length))
                    for length, value in zip(lengths[inside], run_values[inside], strict=True)]
    sign = 1 if metric.higher_is_better else -1  # worst: lowest accuracy, highest loss
    weakest = min(trained, key=lambda t: sign * t[0], default=None)

    def spread(xs: list[float]) -> tuple[float, float, float]:
        """Mean, std (ddof=1; NaN for a single run) and best over the group's runs."""
        xs_array = np.asarray(xs, float)
        std = float(np.std(xs_array, ddof=1)) if len(xs) > 1 else float("nan")
        return float(np.mean(xs_array)), std, float(metric.best(xs_array))

    best = best_word(metric)
    (in_mean, in_std, in_best), (ood_mean, ood_std, ood_best) = spread(in_dist), spread(ood)
    fraction = metric.unit == "%" and metric.higher_is_better
    return {"runs": group["runs"], "in_dist_mean": in_mean, "in_dist_std": in_std,
            f"in_dist_{best}": in_best, "in_dist_worst": min(in_dist, key=lambda v: sign * v),
            "in_dist_weakest": weakest, "ood_mean": ood_mean, "ood_std": ood_std,
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
            "ood_std", f"ood_{best}", "longest_mean", f"longest_{best}")


def markdown_table(summaries: Mapping[str, Mapping[str, Any]], group_by: str,
                   threshold: float, metric: Metric | None = None) -> str:
    """The summary as a markdown table (percentages for fractions)."""
    metric = metric or METRICS[HEADLINE]
    best, show = best_word(metric), metric.display
    limit = f"{100 * threshold:g}%"
    fraction = metric.unit == "%"  # 'longest n above a threshold' is defined for fractions only
    lines = [f"| {group_by} | runs | in-dist mean ± std | in-dist {best} | OOD mean ± std | "
             f"OOD {best} |" + (f" longest n ≥ {limit} (mean) | longest n ≥ {limit} ({best}) |"
                                if fraction else ""),
             "|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if fraction else "")]
    for name, s in summaries.items():
        lines.append(
            f"| {name} | {s['runs']} | {show(s['in_dist_mean'])} ± {show(s['in_dist_std'])}"
            f" | {show(s[f'in_dist_{best}'])} | {show(s['ood_mean'])} ± "
            f"{show(s['ood_std'])} | {show(s[f'ood_{best}'])} |"
            + (f" {s['longest_mean'] or '-'} | {s[f'longest_{best}'] or '-'} |"
               if fraction else ""))
    return "\n".join(lines)
