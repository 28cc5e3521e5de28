"""Compare extrapolation curves across runs: group by a config key, aggregate over seeds.

A run's curve of any metric of the metric table comes from ``RUN_DIR/eval/<name>.json``
(``pe-research eval``), or, for the metrics computed during training, from the last record of
``metrics.jsonl`` with ``eval_length_<n>/<metric>`` keys. Per group the curve is summarised as
the metric table says: mean ± std over seeds (std with ddof=1) and the best seed (the max for
accuracies, which the benchmark papers report; the min for losses); the output says which.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from pe_research.config.naming import short_keys
from pe_research.core.atomic_files import atomic_open, atomic_write_text
from pe_research.core.errors import ConfigError
from pe_research.evaluation.finding import comparison_finding, seed_lines
from pe_research.evaluation.group_summary import (
    averaging_text,
    best_word,
    markdown_table,
    summarize_group,
    summary_columns,
)
from pe_research.evaluation.grouping import (
    config_value,
    group_keys,
    group_label,
    has_key,
    natural_key,
)
from pe_research.evaluation.plots import plot_comparison, save_figure
from pe_research.evaluation.results import eval_settings, read_results
from pe_research.model.metrics import HEADLINE, METRICS, Metric, get_metric, headline_for
from pe_research.runs.run_dir import DEFAULT_EVAL_NAME, RunDir, read_run_config
from pe_research.runs.tracking import read_metrics

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
    settings: tuple[str, ...] = ()  # test-time overrides the curve was measured with

    @property
    def train_lengths(self) -> tuple[int, int]:
        low, high = self.config["data"]["train_lengths"]
        return int(low), int(high)

    def __post_init__(self) -> None:
        order = np.argsort(self.lengths, kind="stable")
        self.lengths, self.values = self.lengths[order], self.values[order]


def check_group_keys(curves: Sequence[RunCurve], group_by: str) -> None:
    """ConfigError for a ``group_by`` key no run's config has (a typo, not a scheme's key)."""
    for key in group_keys(group_by):
        if not any(has_key(curve.config, key) for curve in curves):
            config_value(curves[0].config, key)  # raises, naming the key


def legend_names(curves: Sequence[RunCurve], group_by: str) -> dict[str, str]:
    """Each group's name in a figure legend: a bare number or flag becomes ``key=value``
    (``max_position=128``); names (``alibi``) and multi-key labels stay as they are."""
    keys = group_keys(group_by)
    if len(keys) != 1:
        return {curve.group: curve.group for curve in curves}
    label = short_keys(keys)[keys[0]]
    return {curve.group: curve.group if isinstance(config_value(curve.config, keys[0]), str)
            else f"{label}={curve.group}" for curve in curves}


def load_curve(run_dir: str | Path, metric: str = HEADLINE,
               eval_name: str = DEFAULT_EVAL_NAME, group_by: str = "model.pe.type") -> RunCurve:
    """The curve of ``metric`` for one run (eval results first, then metrics.jsonl)."""
    definition = get_metric(metric)
    paths = RunDir(run_dir)
    run_dir = Path(run_dir)
    if not paths.is_run():
        raise ConfigError("RUN_DIR", str(run_dir), f"not a run directory (no {paths.config.name})")
    config = read_run_config(run_dir)
    group = group_label(config, group_by)
    path = paths.eval_results(eval_name)
    results = read_results(path) if path.is_file() else {"rows": []}
    rows = results["rows"]
    if rows and metric in rows[0]:
        return RunCurve(run_dir, config, group, np.asarray([r["length"] for r in rows]),
                        np.asarray([r[metric] for r in rows], float), f"eval/{path.name}",
                        eval_settings(results.get("overrides", ())))
    if not definition.decoded and paths.metrics.is_file():
        for record in reversed(read_metrics(run_dir)):
            points = sorted((int(m[1]), float(v)) for k, v in record.items()
                            if (m := LENGTH_KEY.match(k)) and m[2] == metric)
            if points:
                lengths, values = zip(*points, strict=True)
                return RunCurve(run_dir, config, group, np.asarray(lengths), np.asarray(values),
                                f"metrics.jsonl step {record['step']}")
    during = tuple(name for name, m in METRICS.items() if not m.decoded)
    oracle = " --config.eval.oracle_length=True" if definition.oracle else ""
    raise ConfigError("--metric", metric,
                      f"{run_dir} has no such curve: run `pe-research eval {run_dir} --name "
                      f"{eval_name}{oracle}`, or use a metric that training logs per length "
                      f"{during}")


def curve_settings(curves: Sequence[RunCurve]) -> str:
    """The test-time settings of the curves, as one phrase ('' when none has any)."""
    kinds = {curve.settings for curve in curves}
    named = ", ".join(sorted({s for settings in kinds for s in settings}))
    return named + (" (not on every run)" if named and len(kinds) > 1 else "")


def default_metric(run_dirs: Sequence[str | Path]) -> str:
    """The tasks' headline (exact match as decoded; perplexity for language modelling); exact
    match at the oracle length when every run was trained without the end token
    (``train.predict_eos`` False) on a task that decodes, whose free decodes never stop."""
    configs = [read_run_config(d) for d in run_dirs if RunDir(d).is_run()]
    headlines = {headline_for(c["task"]["name"]) for c in configs}
    if len(headlines) == 1 and headlines != {HEADLINE}:
        return headlines.pop()
    if configs and not any(c["train"].get("predict_eos", True) for c in configs):
        return "oracle_exact_match"
    return HEADLINE


def what_was_trained(curves: Sequence[RunCurve]) -> tuple[str, str]:
    """('reverse_string', 'trained on lengths 1-10') for a title; several tasks or training
    ranges are named as such, never as the first run's."""
    names = sorted({c.config["task"]["name"] for c in curves})
    ranges = sorted({c.train_lengths for c in curves})
    task = names[0] if len(names) == 1 else (
        ", ".join(names) if len(names) <= 3 else f"{len(names)} tasks")
    if len(names) == 1 and len({json.dumps(c.config["task"], sort_keys=True)
                                for c in curves}) > 1:
        task += " (mixed task settings)"
    spans = [f"{a}-{b}" if a != b else f"{a}" for a, b in ranges]
    trained = ((f"trained on length{'s' if '-' in spans[0] else ''} {spans[0]}")
               if len(ranges) == 1 else "mixed training lengths " + ", ".join(spans))
    return task, trained


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


def aggregate(curves: Sequence[RunCurve], metric: str = HEADLINE) -> dict[str, dict[str, Any]]:
    """Per group: common lengths and mean / std (ddof=1) / best over its runs."""
    definition = get_metric(metric)
    groups: dict[str, list[RunCurve]] = {}
    for curve in curves:
        groups.setdefault(curve.group, []).append(curve)
    result = {}
    for name in sorted(groups, key=natural_key):
        members = groups[name]
        common = sorted(set.intersection(*(set(c.lengths.tolist()) for c in members)))
        if any(len(c.lengths) != len(common) for c in members):
            warnings.warn(f"group {name!r}: runs were evaluated at different lengths; using the "
                          f"{len(common)} lengths they share", stacklevel=2)
        values = np.stack([c.values[np.searchsorted(c.lengths, common)] if len(common) else
                           np.zeros(0) for c in members])
        std = values.std(axis=0, ddof=1) if len(members) > 1 else np.zeros(len(common))
        result[name] = {"lengths": np.asarray(common), "values": values,
                        "mean": values.mean(axis=0), "std": std, "best": definition.best(values),
                        "runs": len(members), "members": members, "metric": definition}
    return result


def comparison(run_dirs: Sequence[str | Path], *, group_by: str = "model.pe.type",
               metric: str = HEADLINE, eval_name: str = DEFAULT_EVAL_NAME,
               threshold: float = 0.9, allow_mixed: bool = False,
               ) -> tuple[list[RunCurve], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The runs' curves, their groups (``aggregate``) and each group's summary."""
    curves = [load_curve(run_dir, metric, eval_name, group_by) for run_dir in run_dirs]
    check_group_keys(curves, group_by)
    check_compatible(curves, allow_mixed)
    groups = aggregate(curves, metric)
    return curves, groups, {name: summarize_group(group, threshold)
                            for name, group in groups.items()}


def training_fit(run_dirs: Sequence[str | Path], metric: str, *, as_trained: bool = False,
                 **options: Any) -> tuple[Metric, dict[str, dict[str, Any]]] | None:
    """The exact-match metric (``default_metric``) and its group summaries, to judge the
    training fit when ``metric`` is another one; None when it is the same or not evaluated.
    ``as_trained``: judge it on the default evaluation (no test-time settings) even for the
    same metric, because the compared curves were measured with such settings."""
    judge = default_metric(run_dirs)
    if as_trained:
        options = {**options, "eval_name": DEFAULT_EVAL_NAME}
    elif judge == metric:
        return None
    try:
        curves, _, summaries = comparison(run_dirs, metric=judge, **options)
    except ConfigError:  # runs evaluated before that metric existed: judge by ``metric``
        return None
    return None if as_trained and curve_settings(curves) else (get_metric(judge), summaries)


@dataclasses.dataclass
class Comparison:
    """What ``compare_runs`` wrote (``paths``: png, markdown, csv) and what its figure draws:
    each group's curves over seeds, the training ranges, the metric and the sentence."""

    paths: dict[str, Path]
    groups: dict[str, dict[str, Any]]
    train_ranges: list[tuple[int, int]]
    metric: str
    title: str
    show: str
    finding: str | None

    def plot(self, ax: Axes | None = None) -> Figure:
        """The comparison as a ``matplotlib.figure.Figure`` (drawn into ``ax`` when given)."""
        return plot_comparison(self.groups, self.train_ranges, self.metric, self.title,
                               self.show, ax)


def compare_runs(run_dirs: Sequence[str | Path], out_dir: str | Path, *,
                 group_by: str = "model.pe.type", metric: str | None = None,
                 eval_name: str = DEFAULT_EVAL_NAME, threshold: float = 0.9,
                 allow_mixed: bool = False, show: str = "both") -> Comparison:
    """Overlay the runs' curves by group; write ``comparison.{png,md,csv}`` into ``out_dir``
    (``metric`` None: ``default_metric``)."""
    if not run_dirs:
        raise ConfigError("RUN_DIR", (), "give at least one run directory (or a glob)")
    metric = metric or default_metric(run_dirs)
    definition = get_metric(metric)
    if show not in ("both", "mean", "max"):
        raise ConfigError("--show", show, "choose one of ('both', 'mean', 'max')")
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError("--threshold", threshold, "a fraction in [0, 1]")
    curves, groups, summaries = comparison(run_dirs, group_by=group_by, metric=metric,
                                           eval_name=eval_name, threshold=threshold,
                                           allow_mixed=allow_mixed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"png": out_dir / "comparison.png", "markdown": out_dir / "comparison.md",
             "csv": out_dir / "comparison.csv"}
    first = curves[0]
    low, high = first.train_lengths
    one_range = len({c.train_lengths for c in curves}) == 1
    if one_range:
        grid = next(iter(groups.values()))["lengths"]
        inside = f"mean over evaluated lengths {low}-{high}"
        beyond = averaging_text([int(n) for n in grid if n > high])
    else:
        inside, beyond = ("mean over evaluated lengths within each run's training range",
                          "mean over evaluated lengths beyond it")
    kinds = {(json.dumps(c.config["task"], sort_keys=True), c.train_lengths) for c in curves}
    mixed = len(kinds) > 1
    title = what_was_trained(curves)
    best = best_word(definition)
    shown = {"both": f"mean ± std over seeds (std with ddof=1) and {best} over seeds",
             "mean": "mean ± std over seeds (std with ddof=1)", "max": f"{best} over seeds"}[show]
    architecture = first.config["model"].get("architecture", "encoder_decoder")
    model = "" if architecture == "encoder_decoder" else f" ({architecture.replace('_', '-')})"
    legend = legend_names(curves, group_by)
    setting = curve_settings(curves)
    measured = f"\nevaluated with {setting}" if setting else ""
    result = Comparison(paths, {legend[name]: group for name, group in groups.items()},
                        [c.train_lengths for c in curves], metric,
                        f"{title[0]}{model}, {title[1]}, by {group_by}{measured}", show, None)
    save_figure(result.plot(), paths["png"])
    sources = sorted({c.source for c in curves})
    notes = [f"# Length extrapolation: {title[0]}{model}, {title[1]}", "",
             f"Metric: {metric}, {definition.axis_label} (from {', '.join(sources)}). "
             + (f"Evaluated with {setting}, test-time settings the runs were not trained "
                "with. " if setting else "")
             + "Runs "
             f"grouped by `{group_by}`. "
             f"Aggregates over seeds: {shown}. In-dist: {inside}; OOD: {beyond}"
             + (f"; longest n: the longest length up to which every evaluated length scores ≥ "
                f"{100 * threshold:g}% on the group's mean (or {best}) curve."
                if definition.unit == "%" else "."), "",
             markdown_table(summaries, group_by, threshold, definition), "",
             *seed_lines(summaries, definition)]
    fit = None if mixed else training_fit(run_dirs, metric, as_trained=bool(setting),
                                          group_by=group_by, eval_name=eval_name,
                                          threshold=threshold)
    if fit:
        fit = fit[0], {legend[name]: s for name, s in fit[1].items()}
    if finding := comparison_finding({legend[name]: g for name, g in groups.items()},
                                     {legend[name]: s for name, s in summaries.items()},
                                     definition, group_by=group_by, mixed=mixed, fit=fit,
                                     setting=setting):
        notes += [f"What the curves show: {finding}", ""]
        result.finding = finding
    notes += [f"Figure: {paths['png'].name}", "", "Runs:"]
    notes += [f"- {name}: " + ", ".join(str(m.run_dir) for m in group["members"])
              for name, group in groups.items()]
    atomic_write_text(paths["markdown"], "\n".join(notes) + "\n")
    with atomic_open(paths["csv"], newline="") as handle:
        writer = csv.writer(handle)
        columns = summary_columns(definition)
        writer.writerow(columns)
        for name, s in summaries.items():
            writer.writerow([name] + ["" if s[c] is None else s[c] for c in columns[1:]])
    return result
