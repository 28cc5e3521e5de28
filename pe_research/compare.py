"""Compare extrapolation curves across runs: group by a config key, aggregate over seeds.

A run's curve comes from ``RUN_DIR/eval/<name>.json`` (``pe-research eval``; decoded exact match
and the other metrics), or, for the teacher-forced metrics, from the last record of
``metrics.jsonl`` with ``eval_length_<n>/<metric>`` keys (the evaluation during training).
Per group the curve is summarised as mean ± std over seeds (std with ddof=1) and max over seeds
(the benchmark papers report the max); the output says which is shown.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pe_research.config import CONFIG_FILE
from pe_research.errors import ConfigError
from pe_research.eval_results import DEFAULT_NAME, read_results, results_path
from pe_research.tracking import read_metrics

EVAL_METRICS = ("exact_match", "decoded_token_accuracy", "token_accuracy")
TRAINING_METRICS = ("sequence_accuracy", "token_accuracy")  # teacher-forced, in metrics.jsonl
LENGTH_KEY = re.compile(r"^eval_length_(\d+)/(\w+)$")


@dataclasses.dataclass
class RunCurve:
    """One run's accuracy (fractions) at each evaluated length."""

    run_dir: Path
    config: dict[str, Any]
    group: str
    lengths: np.ndarray
    values: np.ndarray
    source: str

    @property
    def train_lengths(self) -> tuple[int, int]:
        low, high = self.config["data"]["train_lengths"]
        return int(low), int(high)

    def __post_init__(self) -> None:
        order = np.argsort(self.lengths, kind="stable")
        self.lengths, self.values = self.lengths[order], self.values[order]


def config_value(config: Mapping[str, Any], dotted: str) -> Any:
    """``config['a']['b']`` for ``'a.b'``; ConfigError naming the missing key."""
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ConfigError("--group-by", dotted, "a dotted key of config.json, e.g. "
                              "model.pe.type, seed or model.pe.scaling.type")
        node = node[part]
    return node


def load_curve(run_dir: str | Path, metric: str = "exact_match", eval_name: str = DEFAULT_NAME,
               group_by: str = "model.pe.type") -> RunCurve:
    """The curve of ``metric`` for one run (eval results first, then metrics.jsonl)."""
    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise ConfigError("RUN_DIR", str(run_dir), f"not a run directory (no {CONFIG_FILE})")
    config = json.loads((run_dir / CONFIG_FILE).read_text())
    group = str(config_value(config, group_by))
    path = results_path(run_dir, eval_name)
    if path.is_file() and metric in EVAL_METRICS:
        rows = read_results(path)["rows"]
        return RunCurve(run_dir, config, group, np.asarray([r["length"] for r in rows]),
                        np.asarray([r[metric] for r in rows], float), f"eval/{path.name}")
    if metric in TRAINING_METRICS and (run_dir / "metrics.jsonl").is_file():
        for record in reversed(read_metrics(run_dir)):
            points = sorted((int(m[1]), float(v)) for k, v in record.items()
                            if (m := LENGTH_KEY.match(k)) and m[2] == metric)
            if points:
                lengths, values = zip(*points, strict=True)
                return RunCurve(run_dir, config, group, np.asarray(lengths), np.asarray(values),
                                f"metrics.jsonl step {record['step']}")
    raise ConfigError("--metric", metric,
                      f"{run_dir} has no such curve: run `pe-research eval {run_dir} --name "
                      f"{eval_name}` for {EVAL_METRICS}, or use a teacher-forced metric of "
                      f"metrics.jsonl {TRAINING_METRICS}")


def check_compatible(curves: Sequence[RunCurve], allow_mixed: bool) -> None:
    """Refuse runs trained on different tasks or length ranges unless ``allow_mixed``."""
    first = curves[0]
    for curve in curves[1:]:
        for what, a, b in (("task", first.config["task"], curve.config["task"]),
                           ("data.train_lengths", first.train_lengths, curve.train_lengths)):
            if a != b and not allow_mixed:
                raise ConfigError(
                    "--allow-mixed", False,
                    f"runs differ in {what}: {a} ({first.run_dir}) vs {b} ({curve.run_dir}); "
                    "their curves are not comparable; pass --allow-mixed to overlay them anyway")


def aggregate(curves: Sequence[RunCurve]) -> dict[str, dict[str, Any]]:
    """Per group: common lengths and mean / std (ddof=1) / max over its runs."""
    groups: dict[str, list[RunCurve]] = {}
    for curve in curves:
        groups.setdefault(curve.group, []).append(curve)
    result = {}
    for name in sorted(groups):
        members = groups[name]
        common = sorted(set.intersection(*(set(c.lengths.tolist()) for c in members)))
        if any(len(c.lengths) != len(common) for c in members):
            warnings.warn(f"group {name!r}: runs were evaluated at different lengths; using the "
                          f"{len(common)} lengths they share", stacklevel=2)
        values = np.stack([c.values[np.searchsorted(c.lengths, common)] if len(common) else
                           np.zeros(0) for c in members])
        std = values.std(axis=0, ddof=1) if len(members) > 1 else np.zeros(len(common))
        result[name] = {"lengths": np.asarray(common), "values": values,
                        "mean": values.mean(axis=0), "std": std, "max": values.max(axis=0),
                        "runs": len(members), "members": members}
    return result


def longest_above(lengths: np.ndarray, values: np.ndarray, threshold: float) -> int | None:
    """The longest length n such that every evaluated length <= n scores >= threshold."""
    failing = np.flatnonzero(values < threshold)
    stop = failing[0] if failing.size else len(values)
    return int(lengths[stop - 1]) if stop > 0 else None


def summarize_group(group: Mapping[str, Any], threshold: float) -> dict[str, Any]:
    """In-distribution and out-of-distribution accuracy per run, then over the group's seeds."""
    lengths, values = group["lengths"], group["values"]
    in_dist, ood = [], []
    for run_values, member in zip(values, group["members"], strict=True):
        low, high = member.train_lengths
        inside, beyond = (lengths >= low) & (lengths <= high), lengths > high
        in_dist.append(run_values[inside].mean() if inside.any() else np.nan)
        ood.append(run_values[beyond].mean() if beyond.any() else np.nan)

    def spread(xs: list[float]) -> tuple[float, float, float]:
        """Mean, std (ddof=1; NaN for a single run) and max over the group's runs."""
        xs_array = np.asarray(xs, float)
        std = float(np.std(xs_array, ddof=1)) if len(xs) > 1 else float("nan")
        return float(np.mean(xs_array)), std, float(np.max(xs_array))

    (in_mean, in_std, in_max), (ood_mean, ood_std, ood_max) = spread(in_dist), spread(ood)
    return {"runs": group["runs"], "in_dist_mean": in_mean, "in_dist_std": in_std,
            "in_dist_max": in_max, "ood_mean": ood_mean, "ood_std": ood_std, "ood_max": ood_max,
            "longest_mean": longest_above(lengths, group["mean"], threshold),
            "longest_max": longest_above(lengths, group["max"], threshold)}


SUMMARY_COLUMNS = ("group", "runs", "in_dist_mean", "in_dist_std", "in_dist_max", "ood_mean",
                   "ood_std", "ood_max", "longest_mean", "longest_max")


def _percent(value: float) -> str:
    return "n/a" if value is None or np.isnan(value) else f"{100 * value:.1f}"


def markdown_table(summaries: Mapping[str, Mapping[str, Any]], group_by: str,
                   threshold: float) -> str:
    """The summary as a markdown table (percentages)."""
    limit = f"{100 * threshold:g}%"
    lines = [f"| {group_by} | runs | in-dist mean ± std | in-dist max | OOD mean ± std | OOD max "
             f"| longest n ≥ {limit} (mean) | longest n ≥ {limit} (max) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in summaries.items():
        lines.append(
            f"| {name} | {s['runs']} | {_percent(s['in_dist_mean'])} ± {_percent(s['in_dist_std'])}"
            f" | {_percent(s['in_dist_max'])} | {_percent(s['ood_mean'])} ± "
            f"{_percent(s['ood_std'])} | {_percent(s['ood_max'])} | "
            f"{s['longest_mean'] or '-'} | {s['longest_max'] or '-'} |")
    return "\n".join(lines)


def compare_runs(run_dirs: Sequence[str | Path], out_dir: str | Path, *,
                 group_by: str = "model.pe.type", metric: str = "exact_match",
                 eval_name: str = DEFAULT_NAME, threshold: float = 0.9,
                 allow_mixed: bool = False, show: str = "both") -> dict[str, Path]:
    """Overlay the runs' curves by group; write ``comparison.{png,md,csv}`` into ``out_dir``."""
    from pe_research.plots import plot_comparison

    if not run_dirs:
        raise ConfigError("RUN_DIR", (), "give at least one run directory (or a glob)")
    if show not in ("both", "mean", "max"):
        raise ConfigError("--show", show, "choose one of ('both', 'mean', 'max')")
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError("--threshold", threshold, "a fraction in [0, 1]")
    curves = [load_curve(run_dir, metric, eval_name, group_by) for run_dir in run_dirs]
    check_compatible(curves, allow_mixed)
    groups = aggregate(curves)
    summaries = {name: summarize_group(group, threshold) for name, group in groups.items()}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"png": out_dir / "comparison.png", "markdown": out_dir / "comparison.md",
             "csv": out_dir / "comparison.csv"}
    first = curves[0]
    task, (low, high) = first.config["task"]["name"], first.train_lengths
    kinds = {(json.dumps(c.config["task"], sort_keys=True), c.train_lengths) for c in curves}
    mixed = " (mixed tasks/lengths)" if len(kinds) > 1 else ""
    shown = {"both": "mean ± std over seeds (std with ddof=1) and max over seeds",
             "mean": "mean ± std over seeds (std with ddof=1)", "max": "max over seeds"}[show]
    plot_comparison(groups, first.train_lengths, metric,
                    f"{task}{mixed}, trained on lengths {low}-{high}, by {group_by}",
                    paths["png"], show)
    sources = sorted({c.source for c in curves})
    notes = [f"# Length extrapolation: {task}{mixed}, trained on lengths {low}-{high}", "",
             f"Metric: {metric} (from {', '.join(sources)}). Runs grouped by `{group_by}`. "
             f"Aggregates over seeds: {shown}. In-dist: mean over evaluated lengths {low}-{high}; "
             f"OOD: mean over evaluated lengths > {high}; longest n: the longest length up to "
             f"which every evaluated length scores ≥ {100 * threshold:g}% on the group's mean "
             "(or max) curve.", "", markdown_table(summaries, group_by, threshold), "",
             f"Figure: {paths['png'].name}", "", "Runs:"]
    notes += [f"- {name}: " + ", ".join(str(m.run_dir) for m in group["members"])
              for name, group in groups.items()]
    paths["markdown"].write_text("\n".join(notes) + "\n")
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUMMARY_COLUMNS)
        for name, s in summaries.items():
            writer.writerow([name] + ["" if s[c] is None else s[c] for c in SUMMARY_COLUMNS[1:]])
    return paths
