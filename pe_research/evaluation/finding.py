"""One sentence of what a comparison shows, computed from its numbers, never written in advance.

The sentence first checks that every group learned the training range: each of its seeds scores
at least ``learned`` on average over the training lengths, judged by exact match even when
another metric is compared (``fit``): a per-token score of 99 % can hide a quarter of the
longest training strings decoded wrong. A comparison of undertrained models says so and stops
there. Otherwise the groups are sorted by their mean beyond the training range and split at the
widest gap between neighbours: the curves part ways when that gap is at least ``part_ways`` and
the seeds separate the two sides (every seed of every group above the split scores more than
every seed of every group below it); otherwise the groups are called level, unless the seeds
order some pairs (every seed of one above every seed of the other), which it then names. The
length named in the sentence is the evaluated length beyond training where the two sides' mean
curves are furthest apart. A seed below ``learned`` at one training length (its mean still
reaching it) is named last. Curves measured with test-time settings the runs were not trained
with (``setting``) are said to be so; the training fit is then judged as trained (``fit``), and
the groups whose training lengths fall short under the settings are named. Under the table,
each group's seeds beyond training are listed and the pairs of groups they order are named
(``seed_lines``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pe_research.model.metrics import Metric

LEARNED = 0.95
PART_WAYS = 0.10
# ALiBi's criterion for perplexity curves (Press et al. 2022, fig. 1): a scheme extrapolates when
# its perplexity on windows longer than the training ones stays at (or below) its perplexity at
# the training length. A group holds when the ratio of its mean curve at the longest evaluated
# length to its mean over the training lengths is at most HOLDS.
HOLDS = 1.10


def seed_order(values: Sequence[float], other: Sequence[float]) -> str:
    """``above`` / ``below`` when every seed of ``values`` is above / below every seed of
    ``other`` (the claims table's rule), else ``level``."""
    if min(values) > max(other):
        return "above"
    if max(values) < min(other):
        return "below"
    return "level"


def seed_lines(summaries: Mapping[str, Mapping[str, Any]], metric: Metric) -> list[str]:
    """Markdown lines under a comparison's table: each group's value beyond training per seed,
    and the pairs of groups the seeds order (``seed_order``: every seed of one higher than
    every seed of the other); none when fewer than two groups have two seeds beyond training."""
    runs = _seeded(summaries)
    if len(runs) < 2:
        return []
    percent = metric.unit == "%"
    seeds = "; ".join(f"{name}: " + ", ".join(f"{100 * v:.1f}" if percent else f"{v:.3g}"
                                             for v in values) for name, values in runs.items())
    ordered = [f"{name} higher than {name_list(lower)}" for name, lower in seed_pairs(runs)]
    return [f"OOD per seed ({'%' if percent else metric.label.lower()}, seeds in run order): "
            f"{seeds}.", "",
            "Seeds apart (every seed of one higher than every seed of the other): "
            + ("; ".join(ordered) + "; every other pair overlaps." if ordered
               else "none, every pair overlaps."), ""]


def _seeded(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, list[float]]:
    """Each group's per-seed values beyond training, for the groups with two or more seeds."""
    return {name: list(s["ood_runs"]) for name, s in summaries.items()
            if len(s.get("ood_runs") or []) > 1 and not any(map(math.isnan, s["ood_runs"]))}


def seed_pairs(runs: Mapping[str, Sequence[float]]) -> list[tuple[str, list[str]]]:
    """(group, the groups every one of its seeds is above) for each group above at least one,
    in ``runs``' order (``seed_order``)."""
    pairs = [(name, [other for other in runs if other != name
                     and seed_order(runs[name], runs[other]) == "above"]) for name in runs]
    return [(name, lower) for name, lower in pairs if lower]


def name_list(names: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'; names holding a comma ('pe.type=dape, base=alibi') are
    separated by semicolons, so each stays one name."""
    if len(names) == 1:
        return names[0]
    separator = "; " if any(", " in name for name in names) else ", "
    return f"{separator.join(names[:-1])} and {names[-1]}"


def _percents(values: Sequence[float], below: float | None = None) -> str:
    """'35%' or '35% and 32%'; a value under ``below`` that would round up to it ('95%' for
    94.96%) is cut to one decimal instead ('94.9%')."""
    def text(value: float) -> str:
        if below is not None and value < below and round(100 * value) >= 100 * below:
            return f"{math.floor(1000 * value) / 10:.1f}%"
        return f"{100 * value:.0f}%"

    return name_list([text(v) for v in values])


def describe_comparison(groups: Mapping[str, Mapping[str, Any]],
                        summaries: Mapping[str, Mapping[str, Any]],
                        train_lengths: tuple[int, int], *, learned: float = LEARNED,
                        part_ways: float = PART_WAYS, what: str = "exact match",
                        noun: str = "groups", fit: Mapping[str, Mapping[str, Any]] | None = None,
                        fit_what: str | None = None, setting: str = "") -> str:
    """The sentence for accuracy curves (fractions, higher is better).

    ``groups`` and ``summaries`` are ``compare.aggregate`` and ``group_summary.summarize_group``
    outputs keyed by group name: each group has ``lengths`` [L] and ``mean`` [L]; each summary
    ``in_dist_mean``, ``ood_mean``, ``ood_std`` (NaN for one seed) and ``runs``, and where known
    ``in_dist_worst`` (the weakest seed's mean) and ``in_dist_weakest`` (value, seed, length).
    ``fit`` (summaries of the same groups in ``fit_what``) judges the training fit instead.
    ``setting``: the test-time settings the curves were measured with ('' for none).
    """
    sentence = _sentence(groups, summaries, train_lengths, learned, part_ways, what, noun, fit,
                         fit_what)
    if not setting:
        return sentence
    low, high = train_lengths
    short = [name for name in summaries if not summaries[name]["in_dist_mean"] >= learned]
    under = (f" With these settings the training lengths {low}-{high} themselves fall below "
             f"{100 * learned:.0f}% {what} for {name_list(short)} "
             f"({_percents([summaries[n]['in_dist_mean'] for n in short])} on average)."
             if short else "")
    return (f"Measured with {setting}, which the runs were not trained with (whether they "
            f"learned the training lengths is judged as trained). {sentence}{under}")


def _sentence(groups: Mapping[str, Mapping[str, Any]],
              summaries: Mapping[str, Mapping[str, Any]], train_lengths: tuple[int, int],
              learned: float, part_ways: float, what: str, noun: str,
              fit: Mapping[str, Mapping[str, Any]] | None, fit_what: str | None) -> str:
    """``describe_comparison`` without the test-time settings."""
    fit, fit_what = (fit, fit_what or what) if fit is not None else (summaries, what)
    low, high = train_lengths
    names = list(summaries)
    seeds = sorted({int(s["runs"]) for s in summaries.values()})
    each = noun.removesuffix("s")
    seed_note = (("one seed" if seeds == [1] else f"{seeds[0]} seeds") + f" per {each}"
                 if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]} seeds per {each}")
    beyond = {name: group["lengths"] > high for name, group in groups.items()}
    if not any(mask.any() for mask in beyond.values()):
        return (f"No length beyond the training range {low}-{high} was evaluated, so the "
                "figure shows nothing about extrapolation.")
    worst = {name: fit[name].get("in_dist_worst", fit[name]["in_dist_mean"]) for name in names}
    short = [name for name in names if not worst[name] >= learned]
    if short:
        scores = _percents([worst[name] for name in short], below=learned)
        head = (f"No {each} learned the training lengths {low}-{high}" if len(short) == len(names)
                else f"{name_list(short)} did not learn the training lengths {low}-{high}")
        seed = " on the weakest seed" if any(summaries[n]["runs"] > 1 for n in short) else ""
        return (f"{head} ({scores} {fit_what} in distribution{seed}, below "
                f"{100 * learned:.0f}%), "
                f"so the curves beyond {high} compare undertrained models, not how the {noun} "
                "extrapolate.")
    return _ranking(groups, summaries, names, (low, high), learned, part_ways, what, noun,
                    seed_note, fit_what) + _shortfall(fit, learned, fit_what)


def _shortfall(summaries: Mapping[str, Mapping[str, Any]], learned: float, what: str) -> str:
    """' At one training length a model falls short: ...' naming the weakest (group, seed,
    length) when it scores below ``learned``; else ''."""
    weakest = [(s["in_dist_weakest"], name) for name, s in summaries.items()
               if s.get("in_dist_weakest") is not None]
    if not weakest:
        return ""
    (value, seed, length), name = min(weakest, key=lambda item: item[0][0])
    if value >= learned:
        return ""
    who = f"{name}'s seed {seed}" if summaries[name]["runs"] > 1 else name
    return (f" At one training length a model falls short: {who} scores "
            f"{_percents([value], below=learned)} {what} at length {length}.")


def _ranking(groups: Mapping[str, Mapping[str, Any]], summaries: Mapping[str, Mapping[str, Any]],
             names: Sequence[str], train_lengths: tuple[int, int], learned: float,
             part_ways: float, what: str, noun: str, seed_note: str, fit_what: str) -> str:
    """The sentence once every group learned: one group's mean, a tie, or where they part."""
    low, high = train_lengths
    order = sorted(names, key=lambda name: -summaries[name]["ood_mean"])
    ood = [summaries[name]["ood_mean"] for name in order]
    every = {1: names[0], 2: f"Both {noun}"}.get(len(names), f"All {len(names)} {noun}")
    everyone = (f"{every} learned lengths {low}-{high} (at least "
                f"{100 * learned:.0f}% {fit_what} in distribution, {seed_note})")
    if len(order) < 2:
        return (f"{everyone}; beyond {high}, {order[0]} scores {_percents(ood)} on average.")
    gaps = [ood[i] - ood[i + 1] for i in range(len(order) - 1)]
    cut = int(np.argmax(gaps))
    top, bottom = order[:cut + 1], order[cut + 1:]
    separated = (min(min(_seeds(summaries[n])) for n in top)
                 > max(max(_seeds(summaries[n])) for n in bottom))
    if gaps[cut] < part_ways or not separated:
        why = ("the seeds' ranges overlap" if gaps[cut] >= part_ways
               else f"no gap between neighbours is wider than {100 * part_ways:.0f} points")
        spread = (f"mean {what} over the longer lengths ranges from {100 * ood[-1]:.0f}% to "
                  f"{100 * ood[0]:.0f}%, and {why}")
        # "Level" is the claims table's word for overlapping seeds; where seeds do order some
        # pairs, the sentence must not call every group level.
        ordered = seed_pairs({name: runs for name, runs in _seeded(summaries).items()
                              if name in order})
        if not ordered:
            return f"{everyone}, and beyond {high} they are level: {spread}."
        return (f"{everyone}, and beyond {high} they do not part into two sets: {spread}; "
                "every seed still puts "
                + "; ".join(f"{name} above {name_list(lower)}" for name, lower in ordered)
                + ".")
    longest = max(int(group["lengths"].max()) for group in groups.values())
    at = _widest_length(groups, top, bottom, high)
    top_at = [float(groups[n]["mean"][groups[n]["lengths"] == at][0]) for n in top]
    bottom_at = [float(groups[n]["mean"][groups[n]["lengths"] == at][0]) for n in bottom]
    return (f"{everyone}; beyond {high} the curves part ways: {name_list(top)} "
            f"extrapolate{'s' if len(top) == 1 else ''} furthest ({_percents(ood[:cut + 1])} "
            f"mean {what} over lengths {high + 1}-{longest}, {_percents(top_at)} at length {at}), "
            f"while {name_list(bottom)} fall{'s' if len(bottom) == 1 else ''} to "
            f"{_percents(ood[cut + 1:])} ({_percents(bottom_at)} at length {at}).")


def _seeds(summary: Mapping[str, Any]) -> list[float]:
    """A group's per-seed means beyond training (its mean alone where they are not known)."""
    return list(summary.get("ood_runs") or [summary["ood_mean"]])


def _widest_length(groups: Mapping[str, Mapping[str, Any]], top: Sequence[str],
                   bottom: Sequence[str], high: int) -> int:
    """The evaluated length beyond ``high`` where the worst of ``top`` leads the best of
    ``bottom`` by the most (among lengths every group was evaluated at)."""
    shared = set.intersection(*(set(groups[n]["lengths"].tolist()) for n in [*top, *bottom]))
    candidates = sorted(n for n in shared if n > high)

    def at(name: str, length: int) -> float:
        return float(groups[name]["mean"][groups[name]["lengths"] == length][0])

    return max(candidates, key=lambda n: (min(at(t, n) for t in top)
                                          - max(at(b, n) for b in bottom), -n))


def comparison_finding(groups: Mapping[str, Mapping[str, Any]],
                       summaries: Mapping[str, Mapping[str, Any]], metric: Metric, *,
                       group_by: str = "", mixed: bool = False,
                       fit: tuple[Metric, Mapping[str, Mapping[str, Any]]] | None = None,
                       setting: str = "") -> str | None:
    """The sentence of what the curves show (``describe_comparison`` for accuracies,
    ``describe_perplexity`` for perplexity) over runs of one task and training range; None for
    other metrics or mixed runs. ``fit``: the exact-match
    metric and summaries that judge whether each group learned the training lengths;
    ``setting``: the test-time settings of the curves (``curve_settings``)."""
    if mixed or not groups:
        return None
    first = next(iter(groups.values()))["members"][0]
    noun = "schemes" if group_by == "model.pe.type" else "groups"
    if metric.log_axis and not metric.higher_is_better:
        return describe_perplexity(groups, summaries, first.train_lengths, noun=noun)
    if metric.unit != "%" or not metric.higher_is_better:
        return None
    return describe_comparison(groups, summaries, first.train_lengths,
                               what=metric.label.lower(),
                               noun=noun,
                               fit=fit[1] if fit else None,
                               fit_what=fit[0].label.lower() if fit else None,
                               setting=setting)


def _values(values: Sequence[float], suffix: str = "") -> str:
    return name_list([f"{v:.3g}{suffix}" for v in values])


def describe_perplexity(groups: Mapping[str, Mapping[str, Any]],
                        summaries: Mapping[str, Mapping[str, Any]],
                        train_lengths: tuple[int, int], *, noun: str = "groups",
                        holds: float = HOLDS) -> str:
    """The sentence for perplexity (or any lower-is-better ratio) curves.

    ``groups[name]`` has ``lengths`` [L] and ``mean`` [L]; ``summaries[name]`` has
    ``in_dist_mean`` (mean over the training lengths) and ``runs``.
    """
    low, high = train_lengths
    span = f"{low}" if low == high else f"{low}-{high}"
    longest = min(int(g["lengths"].max()) for g in groups.values())
    if longest <= high:
        return (f"No length beyond the training range {span} was evaluated, so the figure shows "
                "nothing about extrapolation.")
    trained = {name: float(s["in_dist_mean"]) for name, s in summaries.items()}
    at = {name: float(g["mean"][g["lengths"] == longest][0]) for name, g in groups.items()}
    ratio = {name: at[name] / trained[name] for name in groups}
    order = sorted(groups, key=lambda name: ratio[name])
    held = [name for name in order if ratio[name] <= holds]
    rose = [name for name in order if ratio[name] > holds]
    seeds = sorted({int(s["runs"]) for s in summaries.values()})
    seed_note = f"{seeds[0]} seed{'s' if seeds[0] > 1 else ''}" if len(seeds) == 1 else (
        f"{seeds[0]}-{seeds[-1]} seeds")
    best = min(trained, key=trained.get)
    head = (f"At the training length{'s' if low != high else ''} {span} the {noun} reach "
            f"perplexity {min(trained.values()):.3g}-{max(trained.values()):.3g} (mean over "
            f"{seed_note}; {best} lowest). At length {longest}, ")
    if not rose:
        return head + (f"every one stays within {100 * (holds - 1):.0f}% of its own: "
                       + name_list([f"{n} {ratio[n]:.3g}x" for n in order]) + ".")
    if not held:
        return head + (f"every one rises more than {100 * (holds - 1):.0f}% above it: "
                       f"{name_list(rose)} reach{'es' if len(rose) == 1 else ''} "
                       f"{_values([at[n] for n in rose])} "
                       f"({_values([ratio[n] for n in rose], 'x')}).")
    one = len(held) == 1
    return head + (f"{name_list(held)} stay{'s' if one else ''} within {100 * (holds - 1):.0f}% "
                   f"of {'its' if one else 'their'} own "
                   f"({_values([ratio[n] for n in held], 'x')}), while {name_list(rose)} "
                   f"rise{'s' if len(rose) == 1 else ''} to {_values([at[n] for n in rose])} "
                   f"({_values([ratio[n] for n in rose], 'x')}).")
